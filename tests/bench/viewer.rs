//! Viewer speed in real headless Chromium (not a test: `cargo bench -p recap-tests --bench viewer`).
//!
//! 1. Parsing a generated 1M-op archive in the page with `shared` compiled to wasm: the bytes are
//!    fetched once, then `parse_op_count` (the same `LoadedArchive::load` the page uses, including
//!    the copy into wasm memory) is timed with `performance.now()`, best and median of 5.
//! 2. First paint of an archive page for every corpus case on a real `recap serve`: a fresh load
//!    of `/archives/{id}`; the time from navigation start to the frame after the op table is built
//!    (`recap:archive-frame`), and to the end of the DOM build (`recap:archive-painted`), median of 5.
//!
//! Build the viewer first (`cargo xtask wasm --release`). Results go to stdout as a Markdown table.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use recap_tests::browser::{self, Browser};
use shared::archive::*;

fn write_million(path: &Path, ops: u32) -> Result<()> {
    let f = std::fs::File::create(path)?;
    let mut w = ArchiveWriter::new(std::io::BufWriter::new(f))?;
    let m = w.add_module("m", ".version 8.0\n.target sm_90\n.address_size 64\n")?;
    let p = |n: &str, o| ParamDecl { name: n.into(), offset: o, size: 8, align: 8, kind: ParamKind::Pointer };
    let kernels: Vec<KernelId> =
        (0..8).map(|i| w.add_kernel(m, &format!("step_{i}"), vec![p("a", 0), p("b", 8)])).collect::<Result<_, _>>()?;
    let regions: Vec<RegionId> =
        (0..16).map(|i| w.add_region(RegionDecl::new(format!("r{i}"), 1 << 12, DType::F32))).collect::<Result<_, _>>()?;
    for i in 0..ops {
        let (a, b) = (regions[(i % 16) as usize], regions[((i + 1) % 16) as usize]);
        w.launch(LaunchDecl {
            kernel: kernels[(i % 8) as usize],
            grid: [64, 1, 1],
            block: [256, 1, 1],
            shared_bytes: 0,
            params: vec![0; 16],
            relocs: vec![Reloc { offset: 0, target: a, target_offset: 0 }, Reloc { offset: 8, target: b, target_offset: 0 }],
        })?;
    }
    w.finish()?;
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

async fn parse_bench(b: &Browser, base: &str, file: &str) -> Result<(f64, f64, u64)> {
    b.open(base).await?;
    let script = format!(
        r#"const done = arguments[arguments.length - 1];
(async () => {{
  const m = await import('/pkg/recap_viewer.js');
  const bytes = new Uint8Array(await (await fetch('{file}')).arrayBuffer());
  const times = [];
  let ops = 0;
  for (let i = 0; i < 5; i++) {{
    const t0 = performance.now();
    ops = m.parse_op_count(bytes);
    times.push(performance.now() - t0);
  }}
  done({{ times, ops, size: bytes.length }});
}})().catch(e => done({{ error: String(e) }}));"#
    );
    let v = b.client.execute_async(&script, vec![]).await?;
    if let Some(e) = v.get("error") {
        bail!("parse benchmark failed in the page: {e}");
    }
    let mut times: Vec<f64> = v["times"].as_array().context("times")?.iter().filter_map(|x| x.as_f64()).collect();
    let ops = v["ops"].as_u64().unwrap_or(0);
    let best = times.iter().copied().fold(f64::INFINITY, f64::min);
    Ok((best, median(&mut times), ops))
}

async fn paint_bench(b: &Browser, url: &str) -> Result<(f64, f64)> {
    let (mut frame, mut built) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        b.client.goto(url).await?;
        b.wait_for("#ops-rows .row", Duration::from_secs(20)).await?;
        let v = b
            .client
            .execute_async(
                r#"const done = arguments[arguments.length - 1];
const get = () => {
  const f = performance.getEntriesByName('recap:archive-frame')[0];
  const p = performance.getEntriesByName('recap:archive-painted')[0];
  if (f && p) done([f.startTime, p.startTime]); else setTimeout(get, 10);
};
get();"#,
                vec![],
            )
            .await?;
        frame.push(v[0].as_f64().unwrap_or(f64::NAN));
        built.push(v[1].as_f64().unwrap_or(f64::NAN));
    }
    Ok((median(&mut frame), median(&mut built)))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    if !browser::available("viewer benchmark") {
        return Ok(());
    }
    let root = recap_tests::repo_root();
    let dir = tempfile::tempdir()?;
    let web = dir.path().join("web");
    // The page and a generated archive served side by side by the static server.
    copy_dir(&root.join("web"), &web)?;
    let ops = 1_000_000;
    write_million(&web.join("million.recap"), ops)?;
    let size = std::fs::metadata(web.join("million.recap"))?.len();
    let server = recap_tests::static_server::serve(&web)?;
    let b = Browser::start().await?;
    let (best, med, got) = parse_bench(&b, &server.url, "/million.recap").await?;
    assert_eq!(got, ops as u64);
    println!("| parse {ops} ops ({:.1} MiB) in the page | best {best:.0} ms | median {med:.0} ms |", size as f64 / 1048576.0);

    // First paint on a real host with the corpus imported.
    let seed = dir.path().join("seed");
    std::fs::create_dir_all(&seed)?;
    for case in recap_tests::corpus_cases() {
        let name = case.file_name().unwrap().to_string_lossy().to_string();
        let status = std::process::Command::new(recap_tests::recap_bin())
            .arg("import-case")
            .arg(&case)
            .arg("-o")
            .arg(seed.join(format!("{name}.recap")))
            .status()?;
        anyhow::ensure!(status.success(), "import-case {}", case.display());
    }
    let web_dir = root.join("web");
    let host = recap_tests::server::Server::start(
        &dir.path().join("data"),
        &["--web", &web_dir.to_string_lossy(), "--seed", &seed.to_string_lossy()],
    );
    let list: Vec<shared::protocol::ArchiveInfo> =
        reqwest::get(format!("{}/api/archives", host.url)).await?.error_for_status()?.json().await?;
    println!("| case | first frame | DOM built |");
    println!("|---|---|---|");
    for a in list {
        let url = format!("{}/archives/{}", host.url, a.id);
        let (frame, built) = paint_bench(&b, &url).await?;
        println!("| {} ({} ops) | {frame:.0} ms | {built:.0} ms |", a.name, a.ops);
    }
    b.close().await?;
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()))?;
        } else {
            std::fs::copy(&p, to.join(e.file_name()))?;
        }
    }
    Ok(())
}
