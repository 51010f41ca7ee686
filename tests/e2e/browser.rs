//! The viewer in real headless Chromium: the page served over HTTP, archives opened from disk
//! through the file input, parsed in the browser by `shared` compiled to wasm.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use recap_tests::browser::{self, Browser};
use recap_tests::server::Server;
use shared::archive::*;

/// A small but real archive: two kernels, a device loop, a copy and a memset.
fn write_archive(path: &Path) -> Result<()> {
    let file = std::fs::File::create(path)?;
    let mut w = ArchiveWriter::new(std::io::BufWriter::new(file))?;
    // The entries declare their parameters' types, which the page reads values by.
    let m = w.add_module(
        "m",
        ".version 8.0\n.target sm_90\n.address_size 64\n\
         .visible .entry axpy_f32(.param .u64 x, .param .u64 y, .param .f32 a, .param .u32 n)\n{\nret;\n}\n",
    )?;
    let pointer =
        |name: &str, offset| ParamDecl { name: name.into(), offset, size: 8, align: 8, kind: ParamKind::Pointer };
    let axpy = w.add_kernel(
        m,
        "axpy_f32",
        vec![
            pointer("x", 0),
            pointer("y", 8),
            ParamDecl { name: "a".into(), offset: 16, size: 4, align: 4, kind: ParamKind::Value },
            ParamDecl { name: "n".into(), offset: 20, size: 4, align: 4, kind: ParamKind::Value },
        ],
    )?;
    let reduce = w.add_kernel(m, "reduce_sum", vec![pointer("in", 0), pointer("out", 8)])?;
    let x = w.add_region(RegionDecl::new("x", 4096, DType::F32))?;
    let y = w.add_region(RegionDecl::new("y", 4096, DType::F32))?;
    let flag = w.add_region(RegionDecl::new("flag", 4, DType::U32))?;
    w.memset(MemsetOp { region: y, offset: 0, len: 4096, width: 4, pattern: 0 })?;
    w.begin_while(Condition { region: flag, offset: 0, max_iterations: 8 })?;
    for i in 0..40u32 {
        let mut params = vec![0u8; 24];
        params[16..20].copy_from_slice(&(i as f32).to_le_bytes());
        params[20..].copy_from_slice(&1024u32.to_le_bytes());
        w.launch(LaunchDecl {
            kernel: axpy,
            grid: [4, 1, 1],
            block: [256, 1, 1],
            shared_bytes: 0,
            params,
            relocs: vec![
                Reloc { offset: 0, target: x, target_offset: 0 },
                Reloc { offset: 8, target: y, target_offset: 0 },
            ],
        })?;
    }
    w.end_body()?;
    w.launch(LaunchDecl {
        kernel: reduce,
        grid: [1, 1, 1],
        block: [1024, 1, 1],
        shared_bytes: 4096,
        params: vec![0u8; 16],
        relocs: vec![
            Reloc { offset: 0, target: y, target_offset: 0 },
            Reloc { offset: 8, target: flag, target_offset: 0 },
        ],
    })?;
    w.copy(CopyOp { src: y, src_offset: 0, dst: x, dst_offset: 0, len: 4096 })?;
    w.finish()?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_archive_shows_its_ops_and_a_bad_file_says_why() -> Result<()> {
    if !browser::available("local_archive_shows_its_ops_and_a_bad_file_says_why") {
        return Ok(());
    }
    let root = recap_tests::repo_root();
    assert!(root.join("web/pkg/recap_viewer_bg.wasm").exists(), "build the viewer first: cargo xtask wasm");
    let server = recap_tests::static_server::serve(&root.join("web"))?;
    let dir = tempfile::tempdir()?;
    let good = dir.path().join("loop.recap");
    write_archive(&good)?;
    let bytes = std::fs::read(&good)?;
    let bad = dir.path().join("truncated.recap");
    std::fs::write(&bad, &bytes[..bytes.len() - 100])?;

    let b = Browser::start().await?;
    b.open(&server.url).await?;
    b.choose_file("#file-input", &good).await?;
    b.wait_for("#ops-rows .row", Duration::from_secs(10)).await?;
    assert_eq!(b.text("#ops-count").await?, "44 ops");
    let first = b.text("#ops-rows .row[data-op='0']").await?;
    assert!(first.contains("memset"), "row 0: {first}");
    let launch = b.text("#ops-rows .row[data-op='2']").await?;
    for want in ["launch", "axpy_f32", "4 × 256"] {
        assert!(launch.contains(want), "row 2 lacks {want}: {launch}");
    }
    let reduce = b.text("#ops-rows .row[data-op='42']").await?;
    assert!(reduce.contains("reduce_sum") && reduce.contains("4096"), "row 42: {reduce}");
    // Selecting a launch decodes its parameters per the kernel's layout, pointers as regions.
    b.client.find(fantoccini::Locator::Css("#ops-rows .row[data-op='3']")).await?.click().await?;
    let detail = b.text("#op-detail").await?;
    assert!(detail.contains("&x+0") && detail.contains("&y+0"), "detail: {detail}");
    // Values read as the entry declares them: the f32 a float, the u32 an integer (not 1.4e-42).
    let values = b
        .client
        .execute(
            "return [...document.querySelectorAll('#op-detail table.params tbody tr')].map(r => [...r.cells].map(c => c.textContent))",
            vec![],
        )
        .await?;
    let rows: Vec<Vec<String>> = serde_json::from_value(values)?;
    let row = |name: &str| rows.iter().find(|r| r[0] == name).cloned().unwrap_or_default();
    assert_eq!(row("a"), ["a", ".f32", "16", "4", "1.0"], "{rows:?}");
    assert_eq!(row("n"), ["n", ".u32", "20", "4", "1024"], "{rows:?}");
    // The tabs say what they are, with no digit that could read as a count.
    let tabs = b
        .client
        .execute("return [...document.querySelectorAll('#tabs [data-tab]')].map(t => t.textContent)", vec![])
        .await?;
    assert_eq!(tabs, serde_json::json!(["Ops", "Kernels", "Regions", "Bindings", "Graph", "Replay"]));
    let title = b.client.find(fantoccini::Locator::Css("#tabs [data-tab='kernels']")).await?.attr("title").await?;
    assert_eq!(title.as_deref(), Some("Kernels: press 2 to open"));
    b.screenshot("browser-op-list").await?;

    b.choose_file("#file-input", &bad).await?;
    let err = b.wait_for("#load-error", Duration::from_secs(10)).await?;
    let section = err.attr("data-section").await?.unwrap_or_default();
    let text = err.text().await?;
    assert!(
        !section.is_empty() && text.contains("truncated.recap") && text.contains("byte"),
        "error: {section} {text}"
    );
    b.screenshot("browser-invalid-file").await?;
    b.close().await
}

/// An archive with independent branches, a device loop and a 2-D region, big enough (a 4 MiB
/// region of incompressible-ish data) that its upload reports progress.
fn write_dag_archive(path: &Path) -> Result<()> {
    let file = std::fs::File::create(path)?;
    let mut w = ArchiveWriter::new(std::io::BufWriter::new(file))?;
    let m = w.add_module("m", ".version 8.0\n.target sm_90\n.address_size 64\n")?;
    let pointer =
        |name: &str, offset| ParamDecl { name: name.into(), offset, size: 8, align: 8, kind: ParamKind::Pointer };
    let one = |w: &mut ArchiveWriter<_>, name: &str| w.add_kernel(m, name, vec![pointer("p", 0)]);
    let (k_a, k_b) = (one(&mut w, "fill_a")?, one(&mut w, "fill_b")?);
    let k_c = w.add_kernel(m, "combine", vec![pointer("a", 0), pointer("b", 8)])?;
    let (k_d, k_e) = (one(&mut w, "relax")?, one(&mut w, "converged")?);
    let n = 1 << 20;
    let x = w.add_region(RegionDecl::new("x", n * 4, DType::F32))?;
    let y = w.add_region(RegionDecl::new("y", n * 4, DType::F32))?;
    let mut grid = RegionDecl::new("grid", 256 * 256 * 4, DType::F32);
    grid.shape = vec![256, 256];
    let grid = w.add_region(grid)?;
    let flag = w.add_region(RegionDecl::new("flag", 4, DType::U32))?;
    let xs: Vec<u8> = (0..n).flat_map(|i| ((i as f32 * 0.001).sin() * (i as f32).sqrt()).to_le_bytes()).collect();
    w.set_initial_bytes(x, &xs)?;
    let g: Vec<u8> = (0..256 * 256)
        .flat_map(|i| {
            let (r, c) = ((i / 256) as f32 - 128.0, (i % 256) as f32 - 128.0);
            (-(r * r + c * c) / 2000.0).exp().to_le_bytes()
        })
        .collect();
    w.set_initial_bytes(grid, &g)?;
    let launch = |k, regions: &[RegionId]| LaunchDecl {
        kernel: k,
        grid: [256, 1, 1],
        block: [128, 1, 1],
        shared_bytes: 0,
        params: vec![0u8; 8 * regions.len()],
        relocs: regions
            .iter()
            .enumerate()
            .map(|(i, &r)| Reloc { offset: 8 * i as u64, target: r, target_offset: 0 })
            .collect(),
    };
    w.launch(launch(k_a, &[x]))?;
    w.launch(launch(k_b, &[y]))?;
    w.launch(launch(k_c, &[x, y]))?;
    w.begin_while(Condition { region: flag, offset: 0, max_iterations: 100 })?;
    w.launch(launch(k_d, &[grid]))?;
    w.launch(launch(k_e, &[grid, flag]))?;
    w.end_body()?;
    w.copy(CopyOp { src: y, src_offset: 0, dst: x, dst_offset: 0, len: 1024 })?;
    w.add_binding("grid", grid, Direction::InOut)?;
    w.finish()?;
    Ok(())
}

pub(crate) async fn archives(url: &str) -> Result<Vec<shared::protocol::ArchiveInfo>> {
    Ok(reqwest::get(format!("{url}/api/archives")).await?.error_for_status()?.json().await?)
}

pub(crate) async fn wait_attr_eq(b: &Browser, css: &str, attr: &str, want: &str, timeout: Duration) -> Result<()> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let got = b.attr(css, attr).await?;
        if got.as_deref() == Some(want) {
            return Ok(());
        }
        if matches!(got.as_deref(), Some("failed" | "cancelled")) {
            let state = b.text(css).await.unwrap_or_default();
            anyhow::bail!("{css}[{attr}] is {got:?}, not {want}: {state}");
        }
        if std::time::Instant::now() > deadline {
            let state = b.text("main").await.unwrap_or_default();
            anyhow::bail!(
                "{css}[{attr}={want}] not reached within {timeout:?}; the page shows: {}",
                &state[..state.len().min(600)]
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) async fn click(b: &Browser, css: &str) -> Result<()> {
    b.click(css).await
}

/// Key `key` pressed and released with `css` focused, as on a keyboard.
async fn press(b: &Browser, css: &str, key: char) -> Result<()> {
    use fantoccini::actions::{InputSource, KeyAction, KeyActions};
    b.client.execute("document.querySelector(arguments[0]).focus()", vec![css.into()]).await?;
    let keys =
        KeyActions::new("keyboard".into()).then(KeyAction::Down { value: key }).then(KeyAction::Up { value: key });
    b.client.perform_actions(keys).await?;
    Ok(())
}

pub(crate) async fn select_value(b: &Browser, css: &str, value: &str) -> Result<()> {
    b.client
        .execute(
            "const s = document.querySelector(arguments[0]); s.value = arguments[1]; s.dispatchEvent(new Event('input', {bubbles: true}));",
            vec![css.into(), value.into()],
        )
        .await?;
    Ok(())
}

/// Upload with progress, the op list of a host archive (reloadable), the DAG picture, region plots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_archive_upload_op_list_graph_and_regions() -> Result<()> {
    if !browser::available("host_archive_upload_op_list_graph_and_regions") {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let seed = dir.path().join("seed");
    std::fs::create_dir_all(&seed)?;
    let saxpy = recap_tests::corpus_dir().join("nvcc/saxpy");
    let status = std::process::Command::new(recap_tests::recap_bin())
        .arg("import-case")
        .arg(&saxpy)
        .arg("-o")
        .arg(seed.join("saxpy.recap"))
        .status()?;
    assert!(status.success(), "import-case saxpy");
    let web = recap_tests::repo_root().join("web");
    let host =
        Server::start(&dir.path().join("data"), &["--web", &web.to_string_lossy(), "--seed", &seed.to_string_lossy()]);
    let dag = dir.path().join("dag.recap");
    write_dag_archive(&dag)?;

    let b = Browser::start().await?;
    b.open(&host.url).await?;
    b.wait_for("#archive-list .row[data-archive-id]", Duration::from_secs(10)).await?;
    let list = b.text("#archive-list").await?;
    assert!(list.contains("saxpy.recap"), "{list}");

    // Upload: progress reaches 100 %, then the page moves to the stored archive's own URL.
    b.choose_file("#upload-input", &dag).await?;
    b.wait_for("#ops-rows .row", Duration::from_secs(20)).await?;
    let url = b.client.current_url().await?;
    assert!(url.path().starts_with("/archives/"), "after upload: {url}");
    let progress = b.client.find(fantoccini::Locator::Css("body")).await?.attr("data-upload-progress").await?;
    assert_eq!(progress.as_deref(), Some("100"), "upload progress");
    let stored = archives(&host.url).await?;
    assert!(stored.iter().any(|a| a.name == "dag.recap" && url.path().ends_with(&a.id)), "{stored:?}");
    b.screenshot("browser-upload-done").await?;

    // The op list survives a reload of its URL; filters and selection work.
    b.client.goto(url.as_str()).await?;
    b.wait_for("#ops-rows .row", Duration::from_secs(20)).await?;
    assert_eq!(b.text("#ops-count").await?, "7 ops");
    select_value(&b, "#f-kind", "launch").await?;
    assert_eq!(b.text("#ops-count").await?, "5 of 7 ops");
    b.client.find(fantoccini::Locator::Css("#f-kernel")).await?.send_keys("comb").await?;
    assert_eq!(b.text("#ops-count").await?, "1 of 7 ops");
    click(&b, "#ops-rows .row[data-op='2']").await?;
    let detail = b.text("#op-detail").await?;
    assert!(detail.contains("combine") && detail.contains("&x+0") && detail.contains("&y+0"), "detail: {detail}");
    b.screenshot("browser-host-op-list").await?;

    // The DAG: fill_a and fill_b side by side, the loop as a box holding its body.
    click(&b, "[data-tab='graph']").await?;
    b.wait_for("#graph-root .node", Duration::from_secs(10)).await?;
    let nodes = b.client.find_all(fantoccini::Locator::Css("#graph-root .node")).await?;
    assert_eq!(nodes.len(), 7, "every op but none twice");
    let ys = b
        .client
        .execute(
            "return [0,1,2].map(i => document.querySelector(`#graph-root [data-node='${i}'] rect`).getAttribute('y'))",
            vec![],
        )
        .await?;
    assert_eq!(ys[0], ys[1], "independent ops share a layer: {ys}");
    assert_ne!(ys[1], ys[2], "the dependent op sits below: {ys}");
    b.wait_for("#graph-root .node.body[data-node='3'] [data-node='4']", Duration::from_secs(1)).await?;
    b.screenshot("browser-graph").await?;
    // A click shows the op in the side pane, with the ops it waits for, which open in turn.
    click(&b, "#graph-root [data-node='2']").await?;
    let pane = b.text("#graph-pane").await?;
    assert!(pane.contains("combine") && pane.contains("&x+0"), "{pane}");
    assert_eq!(b.text("#g-before").await?.replace('\n', " "), "0 fill_a 1 fill_b");
    click(&b, "#g-before [data-goto-node='1']").await?;
    b.wait_for("#graph-root .node.sel[data-node='1']", Duration::from_secs(1)).await?;
    assert!(b.text("#graph-pane").await?.contains("fill_b"));
    // Search by kernel name: matches marked, Enter jumps from one to the next; j/k step through ops.
    let search = b.client.find(fantoccini::Locator::Css("#g-search")).await?;
    search.send_keys("fill").await?;
    assert_eq!(b.text("#g-matches").await?, "2 matches");
    assert_eq!(b.client.find_all(fantoccini::Locator::Css("#graph-root .node.match")).await?.len(), 2);
    search.send_keys("\u{E007}").await?;
    b.wait_for("#graph-root .node.sel.match[data-node='0']", Duration::from_secs(1)).await?;
    search.send_keys("\u{E007}").await?;
    b.wait_for("#graph-root .node.sel.match[data-node='1']", Duration::from_secs(1)).await?;
    press(&b, "#graph-wrap", 'j').await?;
    b.wait_for("#graph-root .node.sel[data-node='2']", Duration::from_secs(1)).await?;
    press(&b, "#graph-wrap", 'k').await?;
    b.wait_for("#graph-root .node.sel[data-node='1']", Duration::from_secs(1)).await?;
    b.screenshot("browser-graph-search").await?;

    // Regions: the 2-D region previews as a heatmap, the 1-D one as a line.
    click(&b, "[data-tab='regions']").await?;
    click(&b, "[data-region='2']").await?;
    b.wait_for("#region-detail canvas.heatmap", Duration::from_secs(5)).await?;
    b.screenshot("browser-regions-heatmap").await?;
    click(&b, "[data-region='0']").await?;
    b.wait_for("#region-detail svg.plot path.band", Duration::from_secs(5)).await?;

    b.close().await
}

/// `recap import-case` of corpus case `case` (`nvcc/saxpy`) into `dir`.
fn import_case(case: &str, dir: &Path) -> Result<std::path::PathBuf> {
    import_case_as(case, None, dir)
}

/// `recap import-case` of corpus case `case` with the PTX of architecture `ptx` (the importer's
/// default when `None`) into `dir`.
fn import_case_as(case: &str, ptx: Option<&str>, dir: &Path) -> Result<std::path::PathBuf> {
    let name = case.rsplit('/').next().unwrap_or(case);
    let out = match ptx {
        Some(arch) => dir.join(format!("{name}.{arch}.recap")),
        None => dir.join(format!("{name}.recap")),
    };
    let mut cmd = std::process::Command::new(recap_tests::recap_bin());
    cmd.arg("import-case").arg(recap_tests::corpus_dir().join(case)).arg("-o").arg(&out);
    if let Some(arch) = ptx {
        cmd.arg("--ptx").arg(arch);
    }
    let o = cmd.output()?;
    anyhow::ensure!(o.status.success(), "import-case {case}: {}", String::from_utf8_lossy(&o.stderr));
    Ok(out)
}

/// The names of the regions of `archive` that record an expected state, in region order.
fn checked_regions(archive: &Path) -> Result<Vec<String>> {
    let bytes = std::fs::read(archive)?;
    let a = Archive::open(&bytes)?;
    Ok(a.regions().filter(|r| r.expected.is_some()).map(|r| r.name.to_string()).collect())
}

/// The check table as the page shows it: (region name, verdict) per row.
async fn verdicts(b: &Browser) -> Result<Vec<(String, String)>> {
    let v = b
        .client
        .execute(
            "return [...document.querySelectorAll('#r-check-table tr[data-check-region]')].map(r => [r.cells[0].textContent, r.cells[1].textContent])",
            vec![],
        )
        .await?;
    Ok(serde_json::from_value(v)?)
}

/// Replay from the page: a CPU session on the host (per-iteration time, per-op timings and a
/// verdict per region arrive live), the same archive replayed in this browser with the same
/// verdicts, and a second browser that opens the share link and sees the same session from its
/// history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_on_the_host_in_the_browser_and_by_share_link() -> Result<()> {
    if !browser::available("replay_on_the_host_in_the_browser_and_by_share_link") {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let saxpy = import_case("nvcc/saxpy", dir.path())?;
    let want: Vec<(String, String)> = checked_regions(&saxpy)?.into_iter().map(|n| (n, "pass".to_string())).collect();
    assert!(!want.is_empty(), "saxpy records an expected state");
    let web = recap_tests::repo_root().join("web");
    let host = Server::start(&dir.path().join("data"), &["--web", &web.to_string_lossy()]);

    let b = Browser::start().await?;
    b.open(&host.url).await?;
    b.choose_file("#upload-input", &saxpy).await?;
    b.wait_for("#ops-rows .row", Duration::from_secs(20)).await?;
    let archive_url = b.client.current_url().await?;
    assert!(archive_url.path().starts_with("/archives/"), "after upload: {archive_url}");

    // A CPU session on the host, started from the archive page.
    click(&b, "[data-tab='replay']").await?;
    b.wait_for("#r-device option[value='cpu']", Duration::from_secs(10)).await?;
    select_value(&b, "#r-device", "cpu").await?;
    b.client.find(fantoccini::Locator::Css("#r-iters")).await?.clear().await?;
    b.client.find(fantoccini::Locator::Css("#r-iters")).await?.send_keys("3").await?;
    click(&b, "#r-start").await?;
    wait_attr_eq(&b, "#r-state", "data-state", "finished", Duration::from_secs(120)).await?;
    let session_url = b.client.current_url().await?;
    let session_id = session_url.path().strip_prefix("/sessions/").map(str::to_string);
    let Some(session_id) = session_id else { anyhow::bail!("a host replay lives at /sessions/ID, not {session_url}") };
    assert_eq!(b.text("#r-progress").await?, "3/3");
    let host_stats = b.text("#r-iter-chart .stats").await?;
    // The first iteration is the warm-up (JIT): shown apart, not in the summary of the others.
    assert!(
        host_stats.contains("2 iterations") && host_stats.contains("warm-up (iteration 1)"),
        "per-iteration times: {host_stats}"
    );
    assert!(
        !b.client.find_all(fantoccini::Locator::Css("#r-iter-chart svg path")).await?.is_empty(),
        "an iteration chart"
    );
    let op_bars = b.text("#r-op-chart").await?;
    assert!(op_bars.contains("saxpy"), "per-op timings name the kernel: {op_bars}");
    assert!(b.text("#r-verdict").await?.starts_with("PASS"), "host verdict");
    assert_eq!(verdicts(&b).await?, want, "host verdict per region");
    // Output regions are drawn from the host's preview as lines, not as histograms.
    let lines = b.client.find_all(fantoccini::Locator::Css("#r-regions .region-card svg.plot path.band")).await?;
    assert_eq!(lines.len(), want.len(), "a line per output region");
    // What the page shows is what the host recorded.
    let info: shared::protocol::SessionInfo =
        reqwest::get(format!("{}/api/sessions/{session_id}", host.url)).await?.error_for_status()?.json().await?;
    assert_eq!((info.passed, info.iterations, info.device.as_str()), (Some(true), 3, "cpu"));
    let share = b.client.find(fantoccini::Locator::Css("#r-share-url")).await?.prop("value").await?.unwrap_or_default();
    assert_eq!(share, format!("{}/sessions/{session_id}", host.url), "share link");
    b.screenshot("browser-host-replay").await?;

    // The same archive replayed in this browser: same verdicts, no server involved.
    select_value(&b, "#r-device", "browser").await?;
    b.client.find(fantoccini::Locator::Css("#r-iters")).await?.clear().await?;
    b.client.find(fantoccini::Locator::Css("#r-iters")).await?.send_keys("2").await?;
    click(&b, "#r-start").await?;
    wait_attr_eq(&b, "#r-state", "data-state", "finished", Duration::from_secs(120)).await?;
    assert_eq!(b.text("#r-progress").await?, "2/2");
    assert!(b.text("#r-state").await?.contains("this browser"), "device: {}", b.text("#r-state").await?);
    let stats = b.text("#r-iter-chart .stats").await?;
    assert!(stats.contains("1 iteration") && stats.contains("warm-up (iteration 1)"), "{stats}");
    assert!(b.text("#r-verdict").await?.starts_with("PASS"), "browser verdict");
    assert_eq!(verdicts(&b).await?, want, "browser verdict per region");
    // A browser replay is not the host session: the address goes back to the archive's page.
    assert_eq!(b.client.current_url().await?.path(), archive_url.path());
    b.wait_for("#r-regions .region-card svg.plot", Duration::from_secs(5)).await?;
    b.screenshot("browser-wasm-replay").await?;
    b.close().await?;

    // A second browser opens the share link: the same finished session, from its history.
    let second = Browser::start().await?;
    second.open(&share).await?;
    wait_attr_eq(&second, "#r-state", "data-state", "finished", Duration::from_secs(30)).await?;
    assert_eq!(second.text("#r-progress").await?, "3/3");
    assert_eq!(second.text("#r-iter-chart .stats").await?, host_stats, "same per-iteration times");
    assert!(second.text("#r-verdict").await?.starts_with("PASS"));
    assert_eq!(verdicts(&second).await?, want, "shared session verdict per region");
    // The form repeats what the session ran.
    let iters = second.client.find(fantoccini::Locator::Css("#r-iters")).await?.prop("value").await?;
    assert_eq!(iters.as_deref(), Some("3"), "iterations of the shared session");
    second.screenshot("browser-share-link").await?;
    second.close().await
}

/// Every corpus case opened from disk (never uploaded) and replayed in this browser by `shared`'s
/// CPU executor compiled to wasm: each must pass its own check, region by region, as it does on
/// the host's CPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_corpus_case_replays_and_passes_in_the_browser() -> Result<()> {
    if !browser::available("every_corpus_case_replays_and_passes_in_the_browser") {
        return Ok(());
    }
    let root = recap_tests::repo_root();
    let server = recap_tests::static_server::serve(&root.join("web"))?;
    let dir = tempfile::tempdir()?;
    let b = Browser::start().await?;
    b.open(&server.url).await?;
    let mut failures = Vec::new();
    let cases = recap_tests::corpus_cases();
    assert!(cases.len() >= 16, "the corpus has {} cases", cases.len());
    for case in &cases {
        let rel = case.strip_prefix(recap_tests::corpus_dir())?.to_string_lossy().to_string();
        let file = import_case(&rel, dir.path())?;
        let want: Vec<(String, String)> =
            checked_regions(&file)?.into_iter().map(|n| (n, "pass".to_string())).collect();
        let started = std::time::Instant::now();
        let got = match replay_file_in_browser(&b, &file).await {
            Ok(got) => got,
            Err(e) => {
                failures.push(format!("{rel}: {e}"));
                continue;
            }
        };
        let seconds = started.elapsed().as_secs_f64();
        eprintln!("{rel}: {got:?} in {seconds:.1} s");
        if got != want {
            failures.push(format!("{rel}: verdicts {got:?}, want {want:?}"));
        }
        if rel.ends_with("warp_integrate") {
            b.screenshot("browser-wasm-replay-warp").await?;
        }
    }
    b.close().await?;
    assert!(failures.is_empty(), "cases that do not replay in the browser:\n{}", failures.join("\n"));
    Ok(())
}

/// Opens archive `file` from disk in the page at hand and replays it once in this browser; gives
/// the check table's verdicts.
async fn replay_file_in_browser(b: &Browser, file: &Path) -> Result<Vec<(String, String)>> {
    b.choose_file("#file-input", file).await?;
    b.wait_for("#tabs [data-tab='replay']", Duration::from_secs(10)).await?;
    click(b, "[data-tab='replay']").await?;
    let iters = b.wait_for("#r-iters", Duration::from_secs(5)).await?;
    iters.clear().await?;
    iters.send_keys("1").await?;
    click(b, "#r-start").await?;
    wait_attr_eq(b, "#r-state", "data-state", "finished", Duration::from_secs(120)).await?;
    verdicts(b).await
}

/// Triton's matrix products replayed in this browser by the wasm build's interpreter: `tl.dot`
/// compiled for sm_80 (`mma.sync` fed by `ldmatrix`; a flash-attention block with shuffles) and
/// for sm_90 (`wgmma` from shared-memory descriptors), each archive opened from disk and its
/// check passing region by region.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triton_matrix_products_replay_and_pass_in_the_browser() -> Result<()> {
    if !browser::available("triton_matrix_products_replay_and_pass_in_the_browser") {
        return Ok(());
    }
    let server = recap_tests::static_server::serve(&recap_tests::repo_root().join("web"))?;
    let dir = tempfile::tempdir()?;
    let b = Browser::start().await?;
    b.open(&server.url).await?;
    for (case, arch) in [
        ("triton/tr_dot_f16_masked", "sm_80"),
        ("triton/tr_dot_f16", "sm_80"),
        ("triton/tr_dot_bf16", "sm_80"),
        ("triton/tr_dot_attention", "sm_80"),
        ("triton/tr_dot_bf16", "sm_90"),
    ] {
        let file = import_case_as(case, Some(arch), dir.path())?;
        let want: Vec<(String, String)> =
            checked_regions(&file)?.into_iter().map(|n| (n, "pass".to_string())).collect();
        assert!(!want.is_empty(), "{case} records an expected state");
        let got = replay_file_in_browser(&b, &file).await?;
        assert_eq!(got, want, "{case} ({arch}) in the browser");
        assert!(b.text("#r-verdict").await?.starts_with("PASS"), "{case} ({arch}) verdict");
        assert!(b.text("#r-state").await?.contains("this browser"), "{case} ({arch}) ran in the browser");
    }
    b.screenshot("browser-wasm-replay-triton-dot").await?;
    b.close().await
}

/// Regions with a 2-D shape and a 1-D one with a spike, moved by copies (no kernel needed), each
/// with the expected state it will have.
fn write_grid_archive(path: &Path) -> Result<()> {
    let file = std::fs::File::create(path)?;
    let mut w = ArchiveWriter::new(std::io::BufWriter::new(file))?;
    let (rows, cols) = (120u64, 200u64);
    let mut src = RegionDecl::new("field_in", rows * cols * 4, DType::F32);
    src.shape = vec![rows, cols];
    let mut dst = RegionDecl::new("field", rows * cols * 4, DType::F32);
    dst.shape = vec![rows, cols];
    let (src, dst) = (w.add_region(src)?, w.add_region(dst)?);
    let line = w.add_region(RegionDecl::new("signal", 5000 * 4, DType::F32))?;
    // Bright where the column is large: left to right, dark to bright.
    let field: Vec<u8> = (0..rows * cols).flat_map(|i| ((i % cols) as f32 / cols as f32).to_le_bytes()).collect();
    w.set_initial_bytes(src, &field)?;
    w.set_expected_bytes(dst, &field, Tolerance::Exact)?;
    let mut signal: Vec<f32> = (0..5000).map(|i| (i as f32 * 0.01).sin()).collect();
    signal[4321] = 100.0;
    let signal: Vec<u8> = signal.iter().flat_map(|v| v.to_le_bytes()).collect();
    w.set_initial_bytes(line, &signal)?;
    w.set_expected_bytes(line, &signal, Tolerance::Exact)?;
    w.copy(CopyOp { src, src_offset: 0, dst, dst_offset: 0, len: rows * cols * 4 })?;
    w.finish()?;
    Ok(())
}

/// A host session's output regions arrive as downsampled previews and are drawn as the page
/// draws its own data: a heatmap for a 2-D region (its colours follow the data), a line for 1-D
/// (whose top is a single-element spike that a mean would have lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_session_outputs_draw_as_heatmap_and_line() -> Result<()> {
    if !browser::available("host_session_outputs_draw_as_heatmap_and_line") {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let seed = dir.path().join("seed");
    std::fs::create_dir_all(&seed)?;
    write_grid_archive(&seed.join("field.recap"))?;
    let web = recap_tests::repo_root().join("web");
    let host =
        Server::start(&dir.path().join("data"), &["--web", &web.to_string_lossy(), "--seed", &seed.to_string_lossy()]);
    let id = archives(&host.url).await?.into_iter().find(|a| a.name == "field.recap").map(|a| a.id).expect("seeded");

    let b = Browser::start().await?;
    b.open(&format!("{}/archives/{id}#replay", host.url)).await?;
    b.wait_for("#r-device option[value='cpu']", Duration::from_secs(10)).await?;
    select_value(&b, "#r-device", "cpu").await?;
    click(&b, "#r-start").await?;
    wait_attr_eq(&b, "#r-state", "data-state", "finished", Duration::from_secs(60)).await?;
    assert!(b.text("#r-verdict").await?.starts_with("PASS"));

    b.wait_for("[data-out-region='1'] canvas.heatmap", Duration::from_secs(5)).await?;
    // Left column dark, right column bright, in the picture itself.
    let px = b
        .client
        .execute(
            "const c = document.querySelector(\"[data-out-region='1'] canvas.heatmap\"); const g = c.getContext('2d'); \
             const l = g.getImageData(0, 0, 1, 1).data, r = g.getImageData(c.width - 1, 0, 1, 1).data; \
             return [c.width, c.height, l[0] + l[1] + l[2], r[0] + r[1] + r[2], c.getBoundingClientRect().width / c.getBoundingClientRect().height];",
            vec![],
        )
        .await?;
    let v: Vec<f64> = serde_json::from_value(px)?;
    assert!(v[0] > 1.0 && v[1] > 1.0, "a downsampled grid, not one cell: {v:?}");
    assert!(v[2] < 200.0 && v[3] > 450.0, "dark left, bright right: {v:?}");
    assert!((v[4] - 200.0 / 120.0).abs() < 0.05, "drawn in the region's proportions: {v:?}");
    let signal = b.text("[data-out-region='2'] svg.plot").await?;
    assert!(signal.contains("100"), "the spike tops the line: {signal}");
    b.wait_for("[data-out-region='2'] svg.plot path.band", Duration::from_secs(1)).await?;
    b.screenshot("browser-host-previews").await?;
    b.close().await
}

/// A comparison session of two captures (the second with one constant of a kernel changed) opened
/// by its link: the op list marks the op where they part, the button jumps to it, both sides and
/// their difference are drawn, and both sides download as `.npy`. Then a comparison started from
/// the form (interp against native code) agrees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_comparison_shows_where_two_sides_part() -> Result<()> {
    if !browser::available("a_comparison_shows_where_two_sides_part") {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let cpu = recap::Device::cpu();
    let good = crate::capture::saved_workload(&cpu, crate::capture::HEAT_PTX, d, "good.recap");
    let bad = crate::capture::saved_workload(&cpu, &crate::debugging::perturbed_heat(), d, "bad.recap");
    let web = recap_tests::repo_root().join("web");
    let host = Server::start(&d.join("data"), &["--web", &web.to_string_lossy()]);
    let client = reqwest::Client::new();
    let (_, good_info) = crate::host::upload(&client, &host.url, "good", std::fs::read(&good)?).await;
    let (_, bad_info) = crate::host::upload(&client, &host.url, "bad", std::fs::read(&bad)?).await;
    let body = serde_json::json!({"archive": good_info["id"], "kind": "compare", "device": "jit", "compare_with": "interp", "compare_against": bad_info["id"]});
    let created = crate::host::new_session(&client, &host.url, body).await;
    let id = created["id"].as_str().unwrap();

    let b = Browser::start().await?;
    b.open(created["url"].as_str().unwrap()).await?;
    wait_attr_eq(&b, "#r-state", "data-state", "finished", Duration::from_secs(60)).await?;
    let verdict = b.text("#cmp-verdict").await?;
    assert!(verdict.starts_with("DIFFER") && verdict.contains("jit") && verdict.contains("interp"), "{verdict}");
    let info: shared::protocol::SessionInfo =
        reqwest::get(format!("{}/api/sessions/{id}", host.url)).await?.json().await?;
    assert_eq!(info.passed, Some(false));
    // The host's own account of where they part, to hold the page to.
    let events: Vec<serde_json::Value> = crate::host::collect_stream(&host.ws(&format!("/api/sessions/{id}/ws"))).await;
    let parting = events.iter().find(|e| e["type"] == "parted").expect("a parting")["parting"].clone();
    let op = parting["op"].as_u64().unwrap();
    let differing = differing_rows(&b).await?;
    assert_eq!(differing.iter().map(|(o, _)| o.as_str()).collect::<Vec<_>>(), [op.to_string()], "one op differs");
    assert!(b.attr("#cmp-ops .row.agree", "data-cmp-op").await?.is_some(), "the ops before it agree");
    // Pick another op, then jump back to the first divergence.
    click(&b, "#cmp-ops .row.agree").await?;
    click(&b, "#cmp-first").await?;
    wait_attr_eq(&b, "#cmp-parting", "data-parting-op", &op.to_string(), Duration::from_secs(5)).await?;
    // (Headings are set in capitals.)
    let detail = b.text("#cmp-parting").await?.to_lowercase();
    assert!(detail.contains("launch heat_diffuse") && detail.contains("heat_v"), "{detail}");
    assert!(b
        .text("#cmp-first-mismatch")
        .await?
        .contains(&format!("element {}", parting["check"]["first_mismatch"]["index"])));
    let plots = b.client.find_all(fantoccini::Locator::Css("#cmp-parting svg.plot path.band")).await?;
    assert_eq!(plots.len(), 3, "side A, side B and their difference");
    // The download links fetch both sides as .npy.
    let sizes = b
        .client
        .execute_async(
            "const done = arguments[arguments.length - 1]; \
             const links = [...document.querySelectorAll('#cmp-parting a.npy')].map(a => a.href); \
             Promise.all(links.map(u => fetch(u).then(r => r.ok ? r.arrayBuffer() : Promise.reject(r.status)))) \
               .then(bs => done(bs.map(b => [String.fromCharCode(...new Uint8Array(b.slice(1, 6))), b.byteLength])), e => done(String(e)));",
            vec![],
        )
        .await?;
    let sizes: Vec<(String, u64)> =
        serde_json::from_value(sizes.clone()).map_err(|e| anyhow::anyhow!("{e}: {sizes}"))?;
    assert_eq!(sizes.len(), 2, "{sizes:?}");
    assert!(sizes.iter().all(|(magic, n)| magic == "NUMPY" && *n > 4000), "{sizes:?}");
    b.screenshot("browser-compare-parting").await?;

    // From the form: the archive compared on the host's CPU against the interpreter.
    b.open(&format!("{}/archives/{}#replay", host.url, good_info["id"].as_str().unwrap())).await?;
    b.wait_for("#r-device option[value='cpu']", Duration::from_secs(10)).await?;
    select_value(&b, "#r-device", "cpu").await?;
    select_value(&b, "#r-compare", "interp").await?;
    click(&b, "#r-start").await?;
    wait_attr_eq(&b, "#r-state", "data-state", "finished", Duration::from_secs(60)).await?;
    let verdict = b.text("#cmp-verdict").await?;
    assert!(verdict.starts_with("AGREE"), "{verdict}");
    assert!(b.client.find_all(fantoccini::Locator::Css("#cmp-ops .row.differ")).await?.is_empty());

    // The archive's Regions tab offers the initial contents as .npy.
    click(&b, "[data-tab='regions']").await?;
    let initial = "#region-detail a.npy[data-npy='initial']";
    b.wait_for(initial, Duration::from_secs(5)).await?;
    let href = b.attr(initial, "href").await?.unwrap_or_default();
    let npy = reqwest::get(format!("{}{href}", host.url)).await?.error_for_status()?.bytes().await?;
    assert_eq!(&npy[1..6], b"NUMPY", "{href}");

    // With its archive deleted, the comparison's page still shows where the sides part, op by op.
    let del = client.delete(format!("{}/api/archives/{}", host.url, good_info["id"].as_str().unwrap())).send().await?;
    assert!(del.status().is_success(), "{}", del.status());
    b.open(created["url"].as_str().unwrap()).await?;
    b.wait_for("#r-archive-gone", Duration::from_secs(10)).await?;
    wait_attr_eq(&b, "#r-state", "data-state", "finished", Duration::from_secs(30)).await?;
    assert!(b.text("#cmp-verdict").await?.starts_with("DIFFER"));
    let differing = differing_rows(&b).await?;
    assert_eq!(differing.iter().map(|(o, _)| o.as_str()).collect::<Vec<_>>(), [op.to_string()], "one op differs");
    assert!(differing[0].1.contains("heat_diffuse"), "named by the parting's label: {differing:?}");
    wait_attr_eq(&b, "#cmp-parting", "data-parting-op", &op.to_string(), Duration::from_secs(5)).await?;
    b.close().await
}

/// The comparison's differing rows, read in one step: each row's op and its text.
async fn differing_rows(b: &Browser) -> Result<Vec<(String, String)>> {
    let rows = b
        .client
        .execute(
            "return [...document.querySelectorAll('#cmp-ops .row.differ')].map(r => [r.dataset.cmpOp, r.textContent]);",
            vec![],
        )
        .await?;
    Ok(serde_json::from_value(rows)?)
}

/// An NVIDIA Warp capture zipped with its PTX, uploaded from the page: the host converts it, the
/// page opens the archive and says what was converted, and a replay on the host passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warp_capture_uploads_from_the_page() -> Result<()> {
    if !browser::available("a_warp_capture_uploads_from_the_page") {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let zip = crate::wrp::bundle("control_flow", dir.path(), "zip", true);
    let web = recap_tests::repo_root().join("web");
    let host = Server::start(&dir.path().join("data"), &["--web", &web.to_string_lossy()]);
    let b = Browser::start().await?;
    b.open(&host.url).await?;
    b.choose_file("#upload-input", &zip).await?;
    b.wait_for("#ops-rows .row", Duration::from_secs(30)).await?;
    let status = b.client.execute("return document.getElementById('status').textContent", vec![]).await?;
    let status = status.as_str().unwrap_or_default().to_string();
    assert!(status.contains("converted from the Warp capture control_flow.wrp"), "{status}");
    let ops = b.text("#ops-rows").await?;
    assert!(ops.contains("while") && ops.contains("wrp_else"), "the loop and the else branch's flag: {ops}");
    click(&b, "[data-tab='replay']").await?;
    b.wait_for("#r-device option[value='cpu']", Duration::from_secs(10)).await?;
    select_value(&b, "#r-device", "cpu").await?;
    click(&b, "#r-start").await?;
    wait_attr_eq(&b, "#r-state", "data-state", "finished", Duration::from_secs(60)).await?;
    assert!(b.text("#r-verdict").await?.starts_with("PASS"), "Warp's own outputs are matched");
    b.screenshot("browser-warp-upload").await?;
    b.close().await
}

/// A two-device archive opened in the page: its DAG draws one lane per device, every op inside the
/// lane of its device, and the halo copies are the edges between lanes.
#[tokio::test]
async fn a_two_device_archive_draws_one_lane_per_device() -> Result<()> {
    if !browser::available("a_two_device_archive_draws_one_lane_per_device") {
        return Ok(());
    }
    let root = recap_tests::repo_root();
    assert!(root.join("web/pkg/recap_viewer_bg.wasm").exists(), "build the viewer first: cargo xtask wasm");
    let server = recap_tests::static_server::serve(&root.join("web"))?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("halo.recap");
    let bytes = recap_bench::halo_archive(24, 12, 1, 2, false);
    std::fs::write(&file, &bytes)?;
    let archive = shared::archive::Archive::open(&bytes)?;

    let b = Browser::start().await?;
    b.open(&server.url).await?;
    b.choose_file("#file-input", &file).await?;
    b.wait_for("#ops-rows .row", Duration::from_secs(10)).await?;
    click(&b, "[data-tab='graph']").await?;
    b.wait_for("#graph-root .lane", Duration::from_secs(10)).await?;
    let lanes = b
        .client
        .execute(
            "return [...document.querySelectorAll('#graph-root .lane')].map(l => { const r = l.querySelector('rect'); \
             return [l.dataset.device, +r.getAttribute('x'), +r.getAttribute('width'), l.textContent]; })",
            vec![],
        )
        .await?;
    let lanes = lanes.as_array().unwrap();
    assert_eq!(lanes.len(), 2, "{lanes:?}");
    assert_eq!(lanes[1][3], "device 1");
    for op in 0..archive.op_count() as u32 {
        let device = archive.op_device(op) as usize;
        let x = b
            .client
            .execute(
                &format!("return +document.querySelector(`#graph-root [data-node='{op}'] rect`).getAttribute('x')"),
                vec![],
            )
            .await?
            .as_f64()
            .unwrap();
        let (left, width) = (lanes[device][1].as_f64().unwrap(), lanes[device][2].as_f64().unwrap());
        assert!(
            x >= left && x <= left + width,
            "op {op} at x {x} lies in the lane of device {device} ({left}+{width})"
        );
    }
    b.screenshot("browser-device-lanes").await?;
    Ok(())
}

/// The window of the timeline on screen: `(t0, t1)` in ms.
async fn timeline_window(b: &Browser) -> Result<(f64, f64)> {
    let svg = b.wait_for("#tl-svg", Duration::from_secs(5)).await?;
    let t0: f64 = svg.attr("data-t0").await?.unwrap_or_default().parse()?;
    let t1: f64 = svg.attr("data-t1").await?.unwrap_or_default().parse()?;
    Ok((t0, t1))
}

/// The op of the first timeline span matching `css` whose middle the pointer can reach (a span cut
/// by the edge of the view lies under the view's frame there).
async fn reachable_span(b: &Browser, css: &str) -> Result<(String, f64, f64)> {
    let found = b
        .client
        .execute(
            "const w = document.getElementById('tl-wrap').getBoundingClientRect(); \
             for (const e of document.querySelectorAll(arguments[0])) { const r = e.getBoundingClientRect(); \
               const x = r.left + r.width / 2, y = r.top + r.height / 2; \
               if (x > w.left && x < w.right && y > w.top && y < w.bottom && document.elementFromPoint(x, y)?.closest('.span') === e) \
                 return [e.dataset.op, x, y]; } \
             return null;",
            vec![css.into()],
        )
        .await?;
    let (op, x, y): (String, f64, f64) = serde_json::from_value::<Option<_>>(found)?
        .with_context(|| format!("no `{css}` in view that the pointer reaches"))?;
    Ok((op, x, y))
}

/// A click of the left button at `(x, y)` of the viewport, where a user's pointer would be: for a
/// span whose middle `reachable_span` found uncovered (WebDriver's own element click aims at a
/// point of its choosing, which for an SVG group may be one the frame covers).
async fn click_at(b: &Browser, x: f64, y: f64) -> Result<()> {
    use fantoccini::actions::{InputSource, MouseActions, PointerAction, MOUSE_BUTTON_LEFT};
    let m = MouseActions::new("mouse".into())
        .then(PointerAction::MoveTo { duration: None, x: x.round(), y: y.round() })
        .then(PointerAction::Down { button: MOUSE_BUTTON_LEFT })
        .then(PointerAction::Up { button: MOUSE_BUTTON_LEFT });
    b.client.perform_actions(m).await?;
    Ok(())
}

/// `[left, top, width, height]` of the element `css` (scrolled into view first), in viewport pixels.
pub(crate) async fn rect_of(b: &Browser, css: &str) -> Result<[f64; 4]> {
    let r = b
        .client
        .execute(
            "const e = document.querySelector(arguments[0]); e.scrollIntoView({block: 'center'}); \
             const r = e.getBoundingClientRect(); return [r.left, r.top, r.width, r.height];",
            vec![css.into()],
        )
        .await?;
    Ok(serde_json::from_value(r)?)
}

/// The pointer moved to `(x, y)` of the viewport, as a user's mouse would.
async fn mouse_to(b: &Browser, x: f64, y: f64) -> Result<()> {
    use fantoccini::actions::{InputSource, MouseActions, PointerAction};
    let m =
        MouseActions::new("mouse".into()).then(PointerAction::MoveTo { duration: None, x: x.round(), y: y.round() });
    b.client.perform_actions(m).await?;
    Ok(())
}

/// The tooltip's attribute `attr` once it shows.
async fn tip_attr(b: &Browser, attr: &str) -> Result<String> {
    let tip = b.wait_for("#tip:not([hidden])", Duration::from_secs(5)).await?;
    Ok(tip.attr(attr).await?.unwrap_or_default())
}

pub(crate) async fn start_cpu_replay(b: &Browser, iterations: u32) -> Result<()> {
    b.wait_for("#r-device option[value='cpu']", Duration::from_secs(10)).await?;
    select_value(b, "#r-device", "cpu").await?;
    let iters = b.client.find(fantoccini::Locator::Css("#r-iters")).await?;
    iters.clear().await?;
    iters.send_keys(&iterations.to_string()).await?;
    click(b, "#r-start").await?;
    wait_attr_eq(b, "#r-state", "data-state", "finished", Duration::from_secs(120)).await
}

/// A replay's timeline (every op a span, the critical path through the DAG outlined, zoomed by the
/// wheel and panned by dragging, by dependency the chains side by side), values under the pointer
/// on the iteration chart and on a heatmap with its colour scale, the host's sessions listed and
/// filtered by archive, an archive deleted from its row, and its session still showing its results.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeline_heatmap_hover_and_the_sessions_list() -> Result<()> {
    use fantoccini::actions::{InputSource, MouseActions, PointerAction, WheelAction, WheelActions, MOUSE_BUTTON_LEFT};
    if !browser::available("timeline_heatmap_hover_and_the_sessions_list") {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let seed = dir.path().join("seed");
    let o = std::process::Command::new(recap_tests::recap_bin()).arg("examples").arg(&seed).output()?;
    anyhow::ensure!(o.status.success(), "recap examples: {}", String::from_utf8_lossy(&o.stderr));
    let web = recap_tests::repo_root().join("web");
    let host =
        Server::start(&dir.path().join("data"), &["--web", &web.to_string_lossy(), "--seed", &seed.to_string_lossy()]);
    let stored = archives(&host.url).await?;
    let id_of = |name: &str| stored.iter().find(|a| a.name == name).map(|a| a.id.clone()).expect("seeded");
    let (dag, heat) = (id_of("dag-8-chains.recap"), id_of("heat-step.recap"));

    // 8 independent chains of 40 launches, replayed 3 times on the host's CPU.
    let b = Browser::start().await?;
    b.open(&format!("{}/archives/{dag}#replay", host.url)).await?;
    start_cpu_replay(&b, 3).await?;
    let session = b.client.current_url().await?.path().trim_start_matches("/sessions/").to_string();
    b.wait_for("#tl-svg .span", Duration::from_secs(5)).await?;
    let spans = b.client.find_all(fantoccini::Locator::Css("#tl-svg .span")).await?;
    assert_eq!(spans.len(), 320, "a span per op");
    let critical =
        b.wait_for("#tl-critical", Duration::from_secs(1)).await?.attr("data-ops").await?.unwrap_or_default();
    let path: Vec<u32> = critical.split(',').map(|v| v.parse()).collect::<Result<_, _>>()?;
    assert_eq!(path.len(), 40, "the critical path is one chain: {path:?}");
    assert_eq!(b.client.find_all(fantoccini::Locator::Css("#tl-svg .span.crit")).await?.len(), 40);
    assert!(b.text("#tl-stats").await?.contains("critical path"));

    // The wheel zooms in around the pointer; a drag pans.
    let (t0, t1) = timeline_window(&b).await?;
    let [left, top, width, height] = rect_of(&b, "#tl-wrap").await?;
    let (cx, cy) = (left + width / 2.0, top + height / 2.0);
    let wheel = WheelActions::new("wheel".into()).then(WheelAction::Scroll {
        duration: None,
        x: (left + 40.0) as i64,
        y: cy as i64,
        delta_x: 0,
        delta_y: -600,
    });
    b.client.perform_actions(wheel).await?;
    let (z0, z1) = timeline_window(&b).await?;
    assert!(z1 - z0 < (t1 - t0) / 2.0, "zoomed in: {t0}..{t1} -> {z0}..{z1}");
    assert!(z0 < t0 + (t1 - t0) * 0.05, "around the pointer at the left: {z0}..{z1}");
    let shown = b.client.find_all(fantoccini::Locator::Css("#tl-svg .span")).await?.len();
    assert!(shown < 320, "only the spans in view are drawn: {shown}");
    let drag = MouseActions::new("mouse".into())
        .then(PointerAction::MoveTo { duration: None, x: cx.round(), y: cy.round() })
        .then(PointerAction::Down { button: MOUSE_BUTTON_LEFT })
        .then(PointerAction::MoveBy { duration: Some(Duration::from_millis(100)), x: -200.0, y: 0.0 })
        .then(PointerAction::Up { button: MOUSE_BUTTON_LEFT });
    b.client.perform_actions(drag).await?;
    let (p0, p1) = timeline_window(&b).await?;
    assert!(p0 > z0 && ((p1 - p0) - (z1 - z0)).abs() < 1e-6 * (z1 - z0).max(1e-9), "panned: {z0}..{z1} -> {p0}..{p1}");
    // A click on a span in view says which op it is.
    let (op, x, y) = reachable_span(&b, "#tl-svg .span").await?;
    click_at(&b, x, y).await?;
    let detail = b.text("#tl-detail").await?;
    assert!(detail.starts_with(&format!("op {op} ")), "{detail}");
    b.screenshot("browser-timeline-zoomed").await?;
    // Fitted again, every span is in view; one of the critical path says so. (Zoomed in at the
    // left, the critical chain may lie wholly outside the view: which chain is critical depends
    // on this run's timings.)
    click(&b, "[data-tl='fit']").await?;
    let (_, x, y) = reachable_span(&b, "#tl-svg .span.crit").await?;
    click_at(&b, x, y).await?;
    let detail = b.text("#tl-detail").await?;
    assert!(detail.starts_with("op ") && detail.contains("on the critical path"), "{detail}");
    // By dependency, the chains run side by side and end with the critical path.
    let (_, serial_end) = timeline_window(&b).await?;
    click(&b, "[data-tl='dep']").await?;
    let lanes = b
        .client
        .execute(
            "return new Set([...document.querySelectorAll('#tl-svg .span rect')].map(r => r.getAttribute('y'))).size",
            vec![],
        )
        .await?;
    assert!(lanes.as_u64().unwrap_or(0) >= 8, "8 chains side by side: {lanes}");
    let (_, dep_end) = timeline_window(&b).await?;
    let el = b.wait_for("#tl-critical", Duration::from_secs(1)).await?;
    let critical_ms: f64 = el.attr("data-ms").await?.unwrap_or_default().parse()?;
    assert!(
        (dep_end - critical_ms).abs() <= 1e-9 * critical_ms.max(1.0),
        "ends with the critical path: {dep_end} {critical_ms}"
    );
    assert!(dep_end < serial_end, "by dependency {dep_end} ms against {serial_end} ms one after another");
    click(&b, "[data-tl='run']").await?;
    b.screenshot("browser-timeline").await?;

    // The iteration chart: the warm-up apart, the others by number, values under the pointer.
    b.wait_for("#r-iter-chart .warm-up", Duration::from_secs(1)).await?;
    let ticks = b
        .client
        .execute("return [...document.querySelectorAll('#r-iter-chart .xtick')].map(t => t.textContent)", vec![])
        .await?;
    assert_eq!(ticks, serde_json::json!(["2", "3"]), "iterations 2 and 3 on the axis");
    let [l, t, w, h] = rect_of(&b, "#r-iter-chart rect.hover").await?;
    mouse_to(&b, l + w - 2.0, t + h / 2.0).await?;
    assert_eq!(tip_attr(&b, "data-index").await?, "1");
    let tip = b.text("#tip").await?;
    assert!(tip.starts_with("iteration 3: ") && [" ms", " µs", " s"].iter().any(|u| tip.ends_with(u)), "{tip}");

    // A heat step's fields as heatmaps with their colour scale; the pointer tells a cell's value.
    b.open(&format!("{}/archives/{heat}#replay", host.url)).await?;
    start_cpu_replay(&b, 1).await?;
    let heat_session = b.client.current_url().await?.path().trim_start_matches("/sessions/").to_string();
    b.wait_for("[data-out-region='0'] canvas.heatmap", Duration::from_secs(5)).await?;
    let legend = b.wait_for("[data-out-region='0'] .hm-legend", Duration::from_secs(1)).await?;
    let lo: f64 = legend.attr("data-lo").await?.unwrap_or_default().parse()?;
    let hi: f64 = legend.attr("data-hi").await?.unwrap_or_default().parse()?;
    let events = crate::host::collect_stream(&host.ws(&format!("/api/sessions/{heat_session}/ws"))).await;
    let u = events
        .iter()
        .find(|e| e["type"] == "region" && e["summary"]["name"] == "u")
        .map(|e| e["summary"].clone())
        .expect("a summary of u");
    let means: Vec<Option<f64>> = serde_json::from_value(u["preview"]["mean"].clone())?;
    let finite = means.iter().flatten().copied();
    let (want_lo, want_hi) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    assert_eq!((lo, hi), (want_lo, want_hi), "the scale spans the drawn cells");
    let [l, t, w, h] = rect_of(&b, "[data-out-region='0'] canvas.heatmap").await?;
    mouse_to(&b, l + 1.0, t + 1.0).await?;
    assert_eq!((tip_attr(&b, "data-row").await?, tip_attr(&b, "data-col").await?), ("0".into(), "0".into()));
    let value: f64 = tip_attr(&b, "data-value").await?.parse()?;
    assert_eq!(Some(value), means[0], "the top-left cell's value");
    let cols = u["preview"]["cols"].as_u64().unwrap_or(0) as usize;
    let rows = u["preview"]["rows"].as_u64().unwrap_or(0) as usize;
    mouse_to(&b, l + w - 1.0, t + h - 1.0).await?;
    let value: f64 = tip_attr(&b, "data-value").await?.parse()?;
    assert_eq!(Some(value), means[rows * cols - 1], "the bottom-right cell's value");
    assert!(b.text("#tip").await?.contains("mean"), "a cell over several elements says so");
    mouse_to(&b, l + w / 2.0, t + h / 2.0).await?;
    b.wait_for("#tip:not([hidden])", Duration::from_secs(1)).await?;
    b.screenshot("browser-heatmap-hover").await?;

    // The host's sessions, newest first, filtered by archive.
    b.open(&host.url).await?;
    b.wait_for("#session-list .row[data-session-id]", Duration::from_secs(10)).await?;
    let rows = b.client.find_all(fantoccini::Locator::Css("#session-list .row[data-session-id]")).await?;
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].attr("data-session-id").await?.as_deref(), Some(heat_session.as_str()), "newest first");
    select_value(&b, "#session-archive", &dag).await?;
    let rows = b.client.find_all(fantoccini::Locator::Css("#session-list .row[data-session-id]")).await?;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].attr("data-session-id").await?.as_deref(), Some(session.as_str()));
    assert_eq!(b.text("#session-count").await?, "1 of 2 sessions");
    select_value(&b, "#session-archive", "").await?;
    b.screenshot("browser-sessions").await?;

    // Its archive deleted from its row (the first click asks), the session is listed as such and
    // its page still shows its results.
    click(&b, &format!("[data-archive-delete='{dag}']")).await?;
    assert!(archives(&host.url).await?.iter().any(|a| a.id == dag), "one click only asks");
    click(&b, &format!("[data-archive-delete-confirm='{dag}']")).await?;
    b.wait_for(&format!("#session-list .row[data-session-id='{session}'] .tag.gone"), Duration::from_secs(10)).await?;
    assert!(!archives(&host.url).await?.iter().any(|a| a.id == dag), "deleted on the host");
    assert!(b.client.find(fantoccini::Locator::Css(&format!("[data-archive-id='{dag}']"))).await.is_err());
    click(&b, &format!("#session-list .row[data-session-id='{session}']")).await?;
    b.wait_for("#r-archive-gone", Duration::from_secs(10)).await?;
    assert!(b.text("#r-archive-gone").await?.contains("dag-8-chains.recap"));
    wait_attr_eq(&b, "#r-state", "data-state", "finished", Duration::from_secs(30)).await?;
    assert_eq!(b.text("#r-progress").await?, "3/3");
    b.wait_for("#tl-svg .span", Duration::from_secs(5)).await?;
    assert_eq!(b.client.find_all(fantoccini::Locator::Css("#tl-svg .span")).await?.len(), 320);
    let link = b.wait_for("#r-regions a.npy", Duration::from_secs(5)).await?.attr("href").await?.unwrap_or_default();
    let npy = reqwest::get(format!("{}{link}", host.url)).await?.error_for_status()?.bytes().await?;
    assert_eq!(&npy[1..6], b"NUMPY", "a kept region downloads without its archive: {link}");
    b.screenshot("browser-session-without-archive").await?;
    b.close().await
}

/// The numbers the page gives an element's attribute `attr`, for every element matching `css`.
async fn attrs(b: &Browser, css: &str, attr: &str) -> Result<Vec<String>> {
    let v = b
        .client
        .execute(
            "return [...document.querySelectorAll(arguments[0])].map(e => e.getAttribute(arguments[1]))",
            vec![css.into(), attr.into()],
        )
        .await?;
    Ok(serde_json::from_value(v)?)
}

/// How many pixels of the minimap's canvas are drawn (not transparent).
async fn minimap_pixels(b: &Browser) -> Result<u64> {
    let v = b
        .client
        .execute(
            "const c = document.getElementById('minimap-canvas'); \
             const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; \
             let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n;",
            vec![],
        )
        .await?;
    Ok(v.as_u64().unwrap_or(0))
}

/// A while body of 40 launches starts collapsed into one node that says so; a click opens it (and
/// shows the loop in the side pane), its 40 launches then one folded chain, which opens in turn;
/// the toggle folds the body again; a search finds the launches inside the folded body and Enter
/// opens what hides them; expand all and fold all start over; the minimap draws the whole graph
/// and a click on it moves the view there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_graph_folds_bodies_and_chains_and_has_a_minimap() -> Result<()> {
    use fantoccini::actions::{InputSource, MouseActions, PointerAction, MOUSE_BUTTON_LEFT};
    use fantoccini::Locator::Css;
    if !browser::available("a_large_graph_folds_bodies_and_chains_and_has_a_minimap") {
        return Ok(());
    }
    let root = recap_tests::repo_root();
    assert!(root.join("web/pkg/recap_viewer_bg.wasm").exists(), "build the viewer first: cargo xtask wasm");
    let server = recap_tests::static_server::serve(&root.join("web"))?;
    let dir = tempfile::tempdir()?;
    // Ops: 0 memset, 1 while { 2..=41 axpy }, 42 reduce, 43 copy.
    let file = dir.path().join("loop.recap");
    write_archive(&file)?;

    let b = Browser::start().await?;
    b.open(&server.url).await?;
    b.choose_file("#file-input", &file).await?;
    b.wait_for("#ops-rows .row", Duration::from_secs(10)).await?;
    click(&b, "[data-tab='graph']").await?;
    let body = b.wait_for("#graph-root .node.body.collapsed[data-node='1']", Duration::from_secs(10)).await?;
    assert_eq!(body.attr("data-count").await?.as_deref(), Some("40"));
    assert!(body.text().await?.contains("40 ops inside"));
    assert_eq!(attrs(&b, "#graph-root [data-node]", "data-node").await?, ["0", "1", "42", "43"]);
    assert!(b.text("#g-layers").await?.contains("40 ops folded"));

    // The minimap: every node drawn, the view outlined.
    let mini = b.wait_for("#minimap-canvas[data-drawn]", Duration::from_secs(1)).await?;
    assert_eq!(mini.attr("data-drawn").await?.as_deref(), Some("4"));
    assert!(minimap_pixels(&b).await? > 100, "the minimap is drawn");
    let [_, _, vw, vh] = rect_of(&b, "#minimap-view").await?;
    assert!(vw > 0.0 && vh > 0.0, "the view's outline: {vw}x{vh}");

    // A click opens the body, whose 40 launches are one chain; the loop is shown in the pane.
    click(&b, "#graph-root [data-node='1']").await?;
    let chain =
        b.wait_for("#graph-root .node.body[data-node='1'] .node.fold[data-fold='c2']", Duration::from_secs(5)).await?;
    assert_eq!(chain.attr("data-count").await?.as_deref(), Some("40"));
    assert!(chain.text().await?.contains("axpy_f32 ×40"), "{}", chain.text().await?);
    assert!(b.text("#graph-pane").await?.contains("while"));
    click(&b, "#graph-root [data-fold='c2']").await?;
    b.wait_for("#graph-root .node.body[data-node='1'] [data-node='41']", Duration::from_secs(5)).await?;
    assert_eq!(b.client.find_all(Css("#graph-root [data-node]")).await?.len(), 44);
    assert_eq!(b.text("#g-layers").await?, "4 layers at top level");
    assert_eq!(mini_drawn(&b).await?, 44);
    b.screenshot("browser-graph-opened").await?;
    // The chain's toggle folds it again, the body's toggle collapses the body.
    click(&b, "#graph-root .fold-toggle[data-fold='c2']").await?;
    b.wait_for("#graph-root .node.fold[data-fold='c2']", Duration::from_secs(5)).await?;
    click(&b, "#graph-root .fold-toggle[data-fold='b1']").await?;
    b.wait_for("#graph-root .node.body.collapsed[data-node='1']", Duration::from_secs(5)).await?;
    assert!(b.client.find(Css("#graph-root [data-node='2']")).await.is_err());

    // Search: the 40 matches are inside the collapsed body, which is marked; Enter opens the way.
    let search = b.client.find(Css("#g-search")).await?;
    search.send_keys("axpy").await?;
    assert_eq!(b.text("#g-matches").await?, "40 matches, 40 folded");
    b.wait_for("#graph-root .node.body.collapsed.match[data-node='1']", Duration::from_secs(1)).await?;
    search.send_keys("\u{E007}").await?;
    b.wait_for("#graph-root .node.sel.match[data-node='2']", Duration::from_secs(5)).await?;
    assert!(b.text("#graph-pane").await?.contains("axpy_f32"));
    // j steps to the next op, drawn already.
    press(&b, "#graph-wrap", 'j').await?;
    b.wait_for("#graph-root .node.sel[data-node='3']", Duration::from_secs(5)).await?;

    // Fold all, then expand all.
    click(&b, "[data-graph='fold']").await?;
    b.wait_for("#graph-root .node.body.collapsed[data-node='1']", Duration::from_secs(5)).await?;
    click(&b, "[data-graph='expand']").await?;
    b.wait_for("#graph-root [data-node='41']", Duration::from_secs(5)).await?;
    assert_eq!(attrs(&b, "#graph-svg", "data-drawn-nodes").await?, ["44"]);
    assert!(b.client.find(Css("#graph-root .node.fold")).await.is_err(), "nothing folded");

    // Zoomed in, a click on the minimap's far corner moves the view there.
    for _ in 0..6 {
        press(&b, "#graph-wrap", '+').await?;
    }
    let before = rect_of(&b, "#minimap-view").await?;
    let [l, t, w, h] = rect_of(&b, "#minimap-canvas").await?;
    assert!(before[3] < h, "zoomed in, the outline is shorter than the map: {before:?} in {h}");
    let t0 = attrs(&b, "#graph-root", "transform").await?;
    mouse_to(&b, l + w - 3.0, t + h - 3.0).await?;
    let press_release = MouseActions::new("mouse".into())
        .then(PointerAction::Down { button: MOUSE_BUTTON_LEFT })
        .then(PointerAction::Up { button: MOUSE_BUTTON_LEFT });
    b.client.perform_actions(press_release).await?;
    let after = rect_of(&b, "#minimap-view").await?;
    assert_ne!(attrs(&b, "#graph-root", "transform").await?, t0, "the view moved");
    assert!(after[1] > before[1], "down towards the corner: {before:?} -> {after:?}");
    // Far from the view, nodes lose their labels (culled); every node in view keeps its own.
    let culling = b
        .client
        .execute(
            "const wrap = document.getElementById('graph-wrap').getBoundingClientRect(); \
             const nodes = [...document.querySelectorAll('#graph-root .node')]; \
             const inView = n => { const r = n.querySelector(':scope > rect:not(.stack)').getBoundingClientRect(); \
               return r.right > wrap.left && r.left < wrap.right && r.bottom > wrap.top && r.top < wrap.bottom; }; \
             return [nodes.filter(n => n.classList.contains('culled')).length, \
                     nodes.filter(n => inView(n) && n.classList.contains('culled')).length, \
                     nodes.filter(n => inView(n)).length];",
            vec![],
        )
        .await?;
    let [culled, culled_in_view, in_view]: [u64; 3] = serde_json::from_value(culling.clone())?;
    assert!(culled > 0, "zoomed in on 44 nodes, some are far from the view: {culling}");
    assert!(in_view > 0 && culled_in_view == 0, "the nodes in view keep their labels: {culling}");
    b.screenshot("browser-graph-minimap").await?;
    b.close().await
}

async fn mini_drawn(b: &Browser) -> Result<u64> {
    Ok(attrs(b, "#minimap-canvas", "data-drawn").await?[0].parse()?)
}
