//! The viewer in real headless Chromium: the page served over HTTP, archives opened from disk
//! through the file input, parsed in the browser by `shared` compiled to wasm.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use recap_tests::browser::{self, Browser};
use recap_tests::server::Server;
use shared::archive::*;

/// A small but real archive: two kernels, a device loop, a copy and a memset.
pub(crate) fn write_archive(path: &Path) -> Result<()> {
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
    assert_eq!(tabs, serde_json::json!(["Ops", "Kernels", "Regions", "Bindings", "Graph", "Replay", "Timeline"]));
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
pub(crate) async fn press(b: &Browser, css: &str, key: char) -> Result<()> {
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

/// A CPU replay of `iterations` started from the Replay tab's form, waited for until it finishes.
pub(crate) async fn start_cpu_replay(b: &Browser, iterations: u32) -> Result<()> {
    b.wait_for("#r-device option[value='cpu']", Duration::from_secs(10)).await?;
    select_value(b, "#r-device", "cpu").await?;
    let iters = b.client.find(fantoccini::Locator::Css("#r-iters")).await?;
    iters.clear().await?;
    iters.send_keys(&iterations.to_string()).await?;
    click(b, "#r-start").await?;
    wait_attr_eq(b, "#r-state", "data-state", "finished", Duration::from_secs(120)).await
}

/// A host seeded with the example archives, serving the viewer.
pub(crate) fn seeded_host(dir: &std::path::Path) -> Result<Server> {
    let seed = dir.join("seed");
    let o = std::process::Command::new(recap_tests::recap_bin()).arg("examples").arg(&seed).output()?;
    anyhow::ensure!(o.status.success(), "recap examples: {}", String::from_utf8_lossy(&o.stderr));
    let web = recap_tests::repo_root().join("web");
    Ok(Server::start(&dir.join("data"), &["--web", &web.to_string_lossy(), "--seed", &seed.to_string_lossy()]))
}
