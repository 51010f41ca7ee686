//! The viewer in real headless Chromium: the page served over HTTP, archives opened from disk
//! through the file input, parsed in the browser by `shared` compiled to wasm.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use recap_tests::browser::{self, Browser};
use recap_tests::server::Server;
use shared::archive::*;

/// A small but real archive: two kernels, a device loop, a copy and a memset.
fn write_archive(path: &Path) -> Result<()> {
    let file = std::fs::File::create(path)?;
    let mut w = ArchiveWriter::new(std::io::BufWriter::new(file))?;
    let m = w.add_module("m", ".version 8.0\n.target sm_90\n.address_size 64\n")?;
    let pointer = |name: &str, offset| ParamDecl { name: name.into(), offset, size: 8, align: 8, kind: ParamKind::Pointer };
    let axpy = w.add_kernel(m, "axpy_f32", vec![
        pointer("x", 0),
        pointer("y", 8),
        ParamDecl { name: "a".into(), offset: 16, size: 4, align: 4, kind: ParamKind::Value },
    ])?;
    let reduce = w.add_kernel(m, "reduce_sum", vec![pointer("in", 0), pointer("out", 8)])?;
    let x = w.add_region(RegionDecl::new("x", 4096, DType::F32))?;
    let y = w.add_region(RegionDecl::new("y", 4096, DType::F32))?;
    let flag = w.add_region(RegionDecl::new("flag", 4, DType::U32))?;
    w.memset(MemsetOp { region: y, offset: 0, len: 4096, width: 4, pattern: 0 })?;
    w.begin_while(Condition { region: flag, offset: 0, max_iterations: 8 })?;
    for i in 0..40u32 {
        let mut params = vec![0u8; 20];
        params[16..].copy_from_slice(&(i as f32).to_le_bytes());
        w.launch(LaunchDecl {
            kernel: axpy,
            grid: [4, 1, 1],
            block: [256, 1, 1],
            shared_bytes: 0,
            params,
            relocs: vec![Reloc { offset: 0, target: x, target_offset: 0 }, Reloc { offset: 8, target: y, target_offset: 0 }],
        })?;
    }
    w.end_body()?;
    w.launch(LaunchDecl {
        kernel: reduce,
        grid: [1, 1, 1],
        block: [1024, 1, 1],
        shared_bytes: 4096,
        params: vec![0u8; 16],
        relocs: vec![Reloc { offset: 0, target: y, target_offset: 0 }, Reloc { offset: 8, target: flag, target_offset: 0 }],
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
    assert!(detail.contains("&x+0") && detail.contains("&y+0") && detail.contains("1f"), "detail: {detail}");
    b.screenshot("browser-op-list").await?;

    b.choose_file("#file-input", &bad).await?;
    let err = b.wait_for("#load-error", Duration::from_secs(10)).await?;
    let section = err.attr("data-section").await?.unwrap_or_default();
    let text = err.text().await?;
    assert!(!section.is_empty() && text.contains("truncated.recap") && text.contains("byte"), "error: {section} {text}");
    b.screenshot("browser-invalid-file").await?;
    b.close().await
}

/// An archive with independent branches, a device loop and a 2-D region, big enough (a 4 MiB
/// region of incompressible-ish data) that its upload reports progress.
fn write_dag_archive(path: &Path) -> Result<()> {
    let file = std::fs::File::create(path)?;
    let mut w = ArchiveWriter::new(std::io::BufWriter::new(file))?;
    let m = w.add_module("m", ".version 8.0\n.target sm_90\n.address_size 64\n")?;
    let pointer = |name: &str, offset| ParamDecl { name: name.into(), offset, size: 8, align: 8, kind: ParamKind::Pointer };
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
        relocs: regions.iter().enumerate().map(|(i, &r)| Reloc { offset: 8 * i as u64, target: r, target_offset: 0 }).collect(),
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

async fn archives(url: &str) -> Result<Vec<shared::protocol::ArchiveInfo>> {
    Ok(reqwest::get(format!("{url}/api/archives")).await?.error_for_status()?.json().await?)
}

async fn wait_attr_eq(b: &Browser, css: &str, attr: &str, want: &str, timeout: Duration) -> Result<()> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Ok(el) = b.client.find(fantoccini::Locator::Css(css)).await {
            let got = el.attr(attr).await?;
            if got.as_deref() == Some(want) {
                return Ok(());
            }
            if matches!(got.as_deref(), Some("failed" | "cancelled")) {
                let state = b.text(css).await.unwrap_or_default();
                anyhow::bail!("{css}[{attr}] is {got:?}, not {want}: {state}");
            }
        }
        if std::time::Instant::now() > deadline {
            let state = b.text("main").await.unwrap_or_default();
            anyhow::bail!("{css}[{attr}={want}] not reached within {timeout:?}; the page shows: {}", &state[..state.len().min(600)]);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn click(b: &Browser, css: &str) -> Result<()> {
    b.client.find(fantoccini::Locator::Css(css)).await?.click().await?;
    Ok(())
}

async fn select_value(b: &Browser, css: &str, value: &str) -> Result<()> {
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
    let host = Server::start(&dir.path().join("data"), &["--web", &web.to_string_lossy(), "--seed", &seed.to_string_lossy()]);
    let dag = dir.path().join("dag.recap");
    write_dag_archive(&dag)?;

    let b = Browser::start().await?;
    b.open(&host.url).await?;
    b.wait_for("#archive-list a.row", Duration::from_secs(10)).await?;
    assert!(b.text("#archive-list").await?.contains("saxpy.recap"));

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

    // Regions: the 2-D region previews as a heatmap, the 1-D one as a line.
    click(&b, "[data-tab='regions']").await?;
    click(&b, "[data-region='2']").await?;
    b.wait_for("#region-detail canvas.heatmap", Duration::from_secs(5)).await?;
    b.screenshot("browser-regions-heatmap").await?;
    click(&b, "[data-region='0']").await?;
    b.wait_for("#region-detail svg.plot path.band", Duration::from_secs(5)).await?;

    b.close().await
}
