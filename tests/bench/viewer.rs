//! Viewer speed in real headless Chromium (not a test: `cargo bench -p recap-tests --bench viewer`).
//!
//! 1. Parsing a generated 1M-op archive in the page with `shared` compiled to wasm: the bytes are
//!    fetched once, then `parse_op_count` (the same `LoadedArchive::load` the page uses, including
//!    the copy into wasm memory) is timed with `performance.now()`, best and median of 5.
//! 2. First paint of an archive page for every corpus case on a real `recap serve`: a fresh load
//!    of `/archives/{id}`; the time from navigation start to the frame after the op table is built
//!    (`recap:archive-frame`), and to the end of the DOM build (`recap:archive-painted`), median of 5.
//! 3. Scrolling the op table of a 100k-op archive: frame times of a fling and the cost of one jump.
//! 4. The Graph tab of 1,000-op archives (one chain, 8 chains of 125, a pipeline whose ops share
//!    regions so that little folds): the time to draw it as first shown (long chains folded) and
//!    with every op drawn (expand all), each from the click through the forced layout (`sync`) and
//!    to the second frame after it (`frame`), and frame times while dragging and wheel-zooming.
//!
//! Build the viewer first (`cargo xtask wasm --release`). Results go to stdout as a Markdown table.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use recap_tests::browser::{self, Browser};
use shared::archive::*;

/// An archive of `ops` launches of 8 kernels over 16 regions (a long captured pipeline).
fn write_launches(path: &Path, ops: u32) -> Result<()> {
    let f = std::fs::File::create(path)?;
    let mut w = ArchiveWriter::new(std::io::BufWriter::new(f))?;
    let m = w.add_module("m", ".version 8.0\n.target sm_90\n.address_size 64\n")?;
    let p = |n: &str, o| ParamDecl { name: n.into(), offset: o, size: 8, align: 8, kind: ParamKind::Pointer };
    let kernels: Vec<KernelId> =
        (0..8).map(|i| w.add_kernel(m, &format!("step_{i}"), vec![p("a", 0), p("b", 8)])).collect::<Result<_, _>>()?;
    let regions: Vec<RegionId> = (0..16)
        .map(|i| w.add_region(RegionDecl::new(format!("r{i}"), 1 << 12, DType::F32)))
        .collect::<Result<_, _>>()?;
    for i in 0..ops {
        let (a, b) = (regions[(i % 16) as usize], regions[((i + 1) % 16) as usize]);
        w.launch(LaunchDecl {
            kernel: kernels[(i % 8) as usize],
            grid: [64, 1, 1],
            block: [256, 1, 1],
            shared_bytes: 0,
            params: vec![0; 16],
            relocs: vec![
                Reloc { offset: 0, target: a, target_offset: 0 },
                Reloc { offset: 8, target: b, target_offset: 0 },
            ],
        })?;
    }
    w.finish()?;
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Parse timings in the page: (best, median) of the whole call from JS (copy into wasm memory,
/// structure check, op depths), median of the structure check alone, and the op count.
async fn parse_bench(b: &Browser, base: &str, file: &str) -> Result<(f64, f64, f64, u64)> {
    b.open(base).await?;
    let script = format!(
        r#"const done = arguments[arguments.length - 1];
(async () => {{
  const m = await import('/pkg/recap_viewer.js');
  const bytes = new Uint8Array(await (await fetch('{file}')).arrayBuffer());
  const times = [], open = [];
  let ops = 0;
  for (let i = 0; i < 5; i++) {{
    const t0 = performance.now();
    const r = m.bench_parse(bytes);
    times.push(performance.now() - t0);
    ops = r[0];
    open.push(r[1]);
  }}
  done({{ times, open, ops, size: bytes.length }});
}})().catch(e => done({{ error: String(e) }}));"#
    );
    let v = b.client.execute_async(&script, vec![]).await?;
    if let Some(e) = v.get("error") {
        bail!("parse benchmark failed in the page: {e}");
    }
    let floats = |k: &str| -> Result<Vec<f64>> {
        Ok(v[k].as_array().with_context(|| format!("{k} in {v}"))?.iter().filter_map(|x| x.as_f64()).collect())
    };
    let mut times = floats("times")?;
    let mut open = floats("open")?;
    let ops = v["ops"].as_f64().unwrap_or(0.0) as u64;
    let best = times.iter().copied().fold(f64::INFINITY, f64::min);
    Ok((best, median(&mut times), median(&mut open), ops))
}

/// Opens `file` through the page's file input and waits for its op table of `ops` rows.
async fn open_from_disk(b: &Browser, base: &str, file: &Path, ops: u32) -> Result<()> {
    b.open(base).await?;
    b.choose_file("#file-input", file).await?;
    b.wait_for("#ops-rows .row", Duration::from_secs(120)).await?;
    let count = b.text("#ops-count").await?;
    anyhow::ensure!(count == format!("{ops} ops"), "the table shows {count}");
    Ok(())
}

/// Opening a big archive from disk as a user does (file input): the page's own marks give the
/// parse time and the time from the start of parsing to the frame that shows the op table.
async fn local_open_bench(b: &Browser, base: &str, file: &Path, ops: u32) -> Result<(f64, f64)> {
    open_from_disk(b, base, file, ops).await?;
    let v = b
        .client
        .execute_async(
            r#"const done = arguments[arguments.length - 1];
const get = () => {
  const p = performance.getEntriesByName('recap:parse')[0];
  const s = performance.getEntriesByName('recap:parse-start')[0];
  const f = performance.getEntriesByName('recap:archive-frame')[0];
  if (p && s && f) done([p.duration, f.startTime - s.startTime]); else setTimeout(get, 10);
};
get();"#,
            vec![],
        )
        .await?;
    Ok((v[0].as_f64().unwrap_or(f64::NAN), v[1].as_f64().unwrap_or(f64::NAN)))
}

/// Scrolling the op table of a `ops`-op archive opened from disk:
/// 1. a fling: 300 animation frames, each moving the table 37 rows (740 px) further, timed by
///    the frames' own timestamps (at 60 Hz a frame is 16.7 ms; a dropped frame shows as ~33 ms);
/// 2. the work of one scroll step: 300 jumps to random positions, each timed from setting
///    `scrollTop` through the table's scroll handler (dispatched synchronously) to a forced layout
///    of the new rows.
async fn scroll_bench(b: &Browser, base: &str, file: &Path, ops: u32) -> Result<serde_json::Value> {
    open_from_disk(b, base, file, ops).await?;
    let v = b
        .client
        .execute_async(
            r#"const done = arguments[arguments.length - 1];
const el = document.getElementById('ops-scroll');
const pct = (v, p) => { const s = [...v].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };
const frames = [];
let last = null, n = 0;
const step = (t) => {
  if (last !== null) frames.push(t - last);
  last = t;
  el.scrollTop += 740;
  if (++n <= 300) { requestAnimationFrame(step); return; }
  const work = [];
  let seed = 12345;
  for (let i = 0; i < 300; i++) {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    const t0 = performance.now();
    el.scrollTop = (seed / 2147483648) * (el.scrollHeight - el.clientHeight);
    el.dispatchEvent(new Event('scroll'));
    document.querySelector('#ops-rows .row').getBoundingClientRect();
    work.push(performance.now() - t0);
  }
  const rows = document.querySelectorAll('#ops-rows .row').length;
  done({ frames: frames.length, frame_p50: pct(frames, 0.5), frame_p95: pct(frames, 0.95), frame_max: Math.max(...frames),
         slow_frames: frames.filter(f => f > 25).length, work_p50: pct(work, 0.5), work_p95: pct(work, 0.95),
         work_max: Math.max(...work), rows_in_dom: rows, top_row: document.querySelector('#ops-rows .row').dataset.op });
};
requestAnimationFrame(step);"#,
            vec![],
        )
        .await?;
    Ok(v)
}

/// The Graph tab of a `ops`-op archive opened from disk: drawing times folded and expanded, and
/// frame times of a drag and of wheel zooming (synthetic events, one per animation frame, through
/// the page's own handlers).
async fn graph_bench(b: &Browser, base: &str, file: &Path, ops: u32) -> Result<serde_json::Value> {
    open_from_disk(b, base, file, ops).await?;
    let v = b
        .client
        .execute_async(
            r#"const done = arguments[arguments.length - 1];
const frame = () => new Promise(r => requestAnimationFrame(r));
const stats = (v) => { const s = [...v].sort((a, b) => a - b);
  return { p50: s[Math.floor(s.length / 2)], p95: s[Math.min(s.length - 1, Math.floor(0.95 * s.length))], max: s[s.length - 1],
           slow: v.filter(f => f > 25).length }; };
const timeDraw = async (act) => {
  await frame();
  const t0 = performance.now();
  act();
  document.getElementById('graph-root').getBBox();
  document.body.getBoundingClientRect();
  const t1 = performance.now();
  await frame(); await frame();
  return { sync: t1 - t0, frame: performance.now() - t0, nodes: +document.getElementById('graph-svg').dataset.drawnNodes,
           wasm: document.getElementById('g-time').textContent };
};
const wrapCenter = () => { const r = document.getElementById('graph-wrap').getBoundingClientRect();
  return [r.left + r.width / 2, r.top + r.height / 2]; };
const drag = async () => {
  const wrap = document.getElementById('graph-wrap');
  let [x, y] = wrapCenter();
  wrap.dispatchEvent(new MouseEvent('mousedown', { bubbles: true, clientX: x, clientY: y }));
  const frames = []; let last = await frame();
  for (let i = 0; i < 120; i++) {
    const d = i < 60 ? -1 : 1; x += 7 * d; y += 5 * d;
    document.dispatchEvent(new MouseEvent('mousemove', { bubbles: true, clientX: x, clientY: y }));
    const t = await frame(); frames.push(t - last); last = t;
  }
  document.dispatchEvent(new MouseEvent('mouseup', { bubbles: true }));
  return stats(frames);
};
const zoom = async () => {
  const wrap = document.getElementById('graph-wrap');
  const [x, y] = wrapCenter();
  const frames = []; let last = await frame();
  for (let i = 0; i < 120; i++) {
    wrap.dispatchEvent(new WheelEvent('wheel', { bubbles: true, cancelable: true, clientX: x, clientY: y, deltaY: i < 60 ? -40 : 40 }));
    const t = await frame(); frames.push(t - last); last = t;
  }
  return stats(frames);
};
(async () => {
  const out = {};
  out.first = await timeDraw(() => document.querySelector("[data-tab='graph']").click());
  out.first_drag = await drag();
  out.first_zoom = await zoom();
  out.open = await timeDraw(() => document.querySelector("[data-graph='expand']").click());
  out.open_drag = await drag();
  out.open_zoom = await zoom();
  out.fold = await timeDraw(() => document.querySelector("[data-graph='fold']").click());
  done(out);
})().catch(e => done({ error: String(e) }));"#,
            vec![],
        )
        .await?;
    if let Some(e) = v.get("error") {
        bail!("graph benchmark failed in the page: {e}");
    }
    Ok(v)
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
    // `cargo bench` passes `--bench`; other arguments pick parts: parse, scroll, graph, paint.
    let only: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let wanted = |part: &str| only.is_empty() || only.iter().any(|o| o == part);
    if !browser::available("viewer benchmark") {
        return Ok(());
    }
    let root = recap_tests::repo_root();
    let dir = tempfile::tempdir()?;
    let web = dir.path().join("web");
    // The page and a generated archive served side by side by the static server.
    copy_dir(&root.join("web"), &web)?;
    let server = recap_tests::static_server::serve(&web)?;
    let b = Browser::start().await?;
    if wanted("parse") {
        let ops = 1_000_000;
        write_launches(&web.join("million.recap"), ops)?;
        let size = std::fs::metadata(web.join("million.recap"))?.len();
        let (best, med, open, got) = parse_bench(&b, &server.url, "/million.recap").await?;
        assert_eq!(got, ops as u64);
        println!(
            "| parse {ops} ops ({:.1} MiB) in the page | best {best:.0} ms | median {med:.0} ms | of which Archive::open {open:.0} ms |",
            size as f64 / 1048576.0
        );
        let (open, shown) = local_open_bench(&b, &server.url, &web.join("million.recap"), ops).await?;
        println!("| open {ops} ops from disk, op table on screen | parse {open:.0} ms | parse start to first frame {shown:.0} ms |");
    }
    if wanted("scroll") {
        let scroll_ops = 100_000;
        let scroll_file = dir.path().join("scroll.recap");
        write_launches(&scroll_file, scroll_ops)?;
        let s = scroll_bench(&b, &server.url, &scroll_file, scroll_ops).await?;
        let f = |k: &str| s[k].as_f64().unwrap_or(f64::NAN);
        println!(
            "| scroll {scroll_ops} ops, fling of {} frames | frame p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms, {} frames over 25 ms |",
            s["frames"], f("frame_p50"), f("frame_p95"), f("frame_max"), s["slow_frames"]
        );
        println!(
            "| scroll {scroll_ops} ops, one jump (handler + layout) | p50 {:.2} ms, p95 {:.2} ms, max {:.2} ms, {} rows in the DOM |",
            f("work_p50"), f("work_p95"), f("work_max"), s["rows_in_dom"]
        );
    }
    if wanted("graph") {
        let cases: [(&str, Vec<u8>); 2] = [
            ("one chain", recap_bench::chain_archive(1000)),
            ("8 chains of 125", recap_bench::chains_archive(8, 125, 0)),
        ];
        println!("| graph, 1,000 ops | nodes drawn | draw: click to layout / to 2nd frame | drag frames p50/p95/max | wheel-zoom frames p50/p95/max |");
        println!("|---|---|---|---|---|");
        let pipeline = dir.path().join("pipeline.recap");
        write_launches(&pipeline, 1000)?;
        let mut files = vec![("pipeline over 16 shared regions".to_string(), pipeline)];
        for (name, bytes) in cases {
            let file = dir.path().join(format!("{}.recap", name.replace(' ', "-")));
            std::fs::write(&file, bytes)?;
            files.push((name.to_string(), file));
        }
        for (name, file) in files {
            let g = graph_bench(&b, &server.url, &file, 1000).await?;
            let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
            let draw = |v: &serde_json::Value| {
                format!("{:.0} / {:.0} ms ({})", f(v, "sync"), f(v, "frame"), v["wasm"].as_str().unwrap_or(""))
            };
            let frames =
                |v: &serde_json::Value| format!("{:.1} / {:.1} / {:.1} ms", f(v, "p50"), f(v, "p95"), f(v, "max"));
            for (state, draw_key, prefix) in [("as first shown", "first", "first"), ("expand all", "open", "open")] {
                println!(
                    "| {name}, {state} | {} | {} | {} | {} |",
                    g[draw_key]["nodes"],
                    draw(&g[draw_key]),
                    frames(&g[format!("{prefix}_drag")]),
                    frames(&g[format!("{prefix}_zoom")])
                );
            }
            println!("| {name}, fold all | {} | {} | | |", g["fold"]["nodes"], draw(&g["fold"]));
        }
    }
    if !wanted("paint") {
        return b.close().await;
    }

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
