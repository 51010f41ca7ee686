//! The viewer's layout under data that overflows every panel, in real headless Chromium against a
//! real host: at a wide and a small window, on the home page, every tab of an archive and the pages
//! of a replay and a comparison, no scroll area scrolls inside another (only the document may hold
//! one), and no label is cut short without a way to read it whole (a tooltip holding it, or
//! wrapping). The seeded examples overflow nothing, so this test builds its own archive: hundreds
//! of regions and ops, long kernel and region names, and a long list of sessions.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use recap_tests::browser::{self, Browser};
use recap_tests::server::Server;
use shared::archive::*;

use super::browser::click;

/// Kernels in the archive, each with a long mangled name.
const KERNELS: usize = 24;
/// Small `u32` regions the kernels add to, each with a long name and an expected state.
const COUNTERS: usize = 160;
/// Launches; each adds its index to every element of one counter region.
const LAUNCHES: usize = 480;
/// Replay sessions of the archive on the host's CPU, for the long sessions lists.
const SESSIONS: usize = 30;
/// Elements of a counter region, one per thread of a launch's only block.
const THREADS: usize = 64;

fn kernel_name(k: usize) -> String {
    format!(
        "_ZN5recap6layout9attention34fused_softmax_dropout_scale_backwardILi128ELi64ELb1EEEvPjjNS_7variantILi{k:02}EEE"
    )
}

fn region_name(r: usize) -> String {
    format!("encoder.layer_{r:03}.self_attention.output_projection.weight_gradient_accumulator")
}

/// `p[tid.x] += v` over `u32`s: real PTX, so the host's CPU replays every launch.
fn module_ptx() -> String {
    let mut ptx = String::from(".version 8.0\n.target sm_80\n.address_size 64\n");
    for k in 0..KERNELS {
        ptx.push_str(&format!(
            "\n.visible .entry {}(.param .u64 p, .param .u32 v)\n{{\n\
             .reg .b32 %r<5>;\n.reg .b64 %rd<4>;\n\
             ld.param.u64 %rd1, [p];\ncvta.to.global.u64 %rd2, %rd1;\nmov.u32 %r1, %tid.x;\n\
             mul.wide.u32 %rd3, %r1, 4;\nadd.s64 %rd3, %rd2, %rd3;\nld.param.u32 %r2, [v];\n\
             ld.global.u32 %r3, [%rd3];\nadd.u32 %r4, %r3, %r2;\nst.global.u32 [%rd3], %r4;\nret;\n}}\n",
            kernel_name(k)
        ));
    }
    ptx
}

/// The archive every panel overflows with; `salt` makes archives of other bytes for the list.
fn write_big_archive(path: &Path, salt: u32) -> Result<()> {
    let file = std::fs::File::create(path)?;
    let mut w = ArchiveWriter::new(std::io::BufWriter::new(file))?;
    let m = w.add_module("transformer_backward_fused_kernels_generated_by_the_layout_test", &module_ptx())?;
    let params = vec![
        ParamDecl { name: "p".into(), offset: 0, size: 8, align: 8, kind: ParamKind::Pointer },
        ParamDecl { name: "v".into(), offset: 8, size: 4, align: 4, kind: ParamKind::Value },
    ];
    let kernels =
        (0..KERNELS).map(|k| w.add_kernel(m, &kernel_name(k), params.clone())).collect::<Result<Vec<_>, _>>()?;
    let counters = (0..COUNTERS)
        .map(|r| w.add_region(RegionDecl::new(region_name(r), (THREADS * 4) as u64, DType::U32)))
        .collect::<Result<Vec<_>, _>>()?;
    // Two 2-D fields for heatmaps; a copy moves one onto the other.
    let mut field = RegionDecl::new("pressure_field_after_the_projection_step_of_the_solver", 96 * 128 * 4, DType::F32);
    field.shape = vec![96, 128];
    let source = w.add_region(field.clone())?;
    field.name = "pressure_field_copied_for_the_next_step_of_the_solver".into();
    let target = w.add_region(field)?;
    let values: Vec<u8> = (0..96 * 128).flat_map(|i| ((i as f32 * 0.01).sin() + salt as f32).to_le_bytes()).collect();
    w.set_initial_bytes(source, &values)?;
    let mut expected = vec![[0u32; THREADS]; COUNTERS];
    for (r, &region) in counters.iter().enumerate() {
        let initial: Vec<u8> = (0..THREADS as u32).flat_map(|i| (i + r as u32 + salt).to_le_bytes()).collect();
        w.set_initial_bytes(region, &initial)?;
        for (i, e) in expected[r].iter_mut().enumerate() {
            *e = i as u32 + r as u32 + salt;
        }
    }
    for i in 0..LAUNCHES {
        let r = (i * 7) % COUNTERS;
        let mut params = vec![0u8; 12];
        params[8..].copy_from_slice(&(i as u32).to_le_bytes());
        w.launch(LaunchDecl {
            kernel: kernels[i % KERNELS],
            grid: [1, 1, 1],
            block: [THREADS as u32, 1, 1],
            shared_bytes: 0,
            params,
            relocs: vec![Reloc { offset: 0, target: counters[r], target_offset: 0 }],
        })?;
        for e in expected[r].iter_mut() {
            *e = e.wrapping_add(i as u32);
        }
        if i % 60 == 59 {
            w.copy(CopyOp { src: source, src_offset: 0, dst: target, dst_offset: 0, len: 96 * 128 * 4 })?;
        }
    }
    for (r, &region) in counters.iter().enumerate() {
        let bytes: Vec<u8> = expected[r].iter().flat_map(|e| e.to_le_bytes()).collect();
        w.set_expected_bytes(region, &bytes, Tolerance::Exact)?;
    }
    w.set_expected_bytes(target, &values, Tolerance::Exact)?;
    for (r, &region) in counters.iter().enumerate().take(40) {
        w.add_binding(&format!("gradient_accumulator_of_layer_{r:03}_self_attention"), region, Direction::InOut)?;
    }
    w.finish()?;
    Ok(())
}

/// Run in the page: every scroll area (overflow auto or scroll, with more content than room on
/// that axis) with a scroll area around it other than the document; and every run of text cut by
/// a box that clips it (overflow hidden or clip, before any scroll area that could bring it into
/// view) whose nearest tooltip does not hold it whole. SVG drawings are left out: their labels
/// carry their own `<title>` and the graph's tests hold them to their boxes.
const LAYOUT_FAULTS: &str = r#"
const name = (e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '')
  + (typeof e.className === 'string' && e.className.trim() ? '.' + e.className.trim().split(/\s+/).join('.') : '');
const scrolls = (s) => /auto|scroll/.test(s);
const scrollable = (e) => {
  const s = getComputedStyle(e);
  return (scrolls(s.overflowX) && e.scrollWidth > e.clientWidth + 1)
    || (scrolls(s.overflowY) && e.scrollHeight > e.clientHeight + 1);
};
const faults = [];
for (const e of document.body.querySelectorAll('*')) {
  if (!scrollable(e)) continue;
  for (let a = e.parentElement; a && a !== document.body; a = a.parentElement) {
    if (scrollable(a)) { faults.push(name(e) + ' scrolls inside ' + name(a)); break; }
  }
}
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
while (walker.nextNode()) {
  const t = walker.currentNode;
  const text = t.textContent.trim();
  const el = t.parentElement;
  if (!text || !el || el.closest('svg, select, option, datalist, script, style, textarea')) continue;
  const range = document.createRange();
  range.selectNodeContents(t);
  const rects = [...range.getClientRects()].filter((r) => r.width > 0 && r.height > 0);
  if (!rects.length) continue;
  const left = Math.min(...rects.map((r) => r.left)), right = Math.max(...rects.map((r) => r.right));
  const top = Math.min(...rects.map((r) => r.top)), bottom = Math.max(...rects.map((r) => r.bottom));
  for (let a = el; a && a !== document.body; a = a.parentElement) {
    const s = getComputedStyle(a);
    if (scrolls(s.overflowX) || scrolls(s.overflowY)) break;
    const hx = /hidden|clip/.test(s.overflowX), hy = /hidden|clip/.test(s.overflowY);
    if (!hx && !hy) continue;
    // Its content box: an ellipsis starts where the padding does.
    const box = a.getBoundingClientRect(), px = (v) => parseFloat(v) || 0;
    const l = box.left + a.clientLeft + px(s.paddingLeft), r = box.left + a.clientLeft + a.clientWidth - px(s.paddingRight);
    const tp = box.top + a.clientTop + px(s.paddingTop), b = box.top + a.clientTop + a.clientHeight - px(s.paddingBottom);
    if ((hx && (left < l - 1 || right > r + 1)) || (hy && (top < tp - 1 || bottom > b + 1))) {
      const tip = el.closest('[title]');
      if (!tip || !tip.getAttribute('title').includes(text)) {
        faults.push('"' + text.slice(0, 80) + '" in ' + name(el) + ' is cut by ' + name(a) + ' with no tooltip holding it');
      }
      break;
    }
  }
}
return faults;
"#;

async fn faults_of(b: &Browser, page: &str, size: (u64, u64), out: &mut Vec<String>) -> Result<()> {
    // A frame for the last render to be laid out.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let found: Vec<String> = serde_json::from_value(b.client.execute(LAYOUT_FAULTS, vec![]).await?)?;
    out.extend(found.into_iter().map(|f| format!("{page} at {}x{}: {f}", size.0, size.1)));
    Ok(())
}

/// Waits until every session of the host has finished.
async fn wait_all_finished(url: &str, want: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let list: Vec<shared::protocol::SessionInfo> =
            reqwest::get(format!("{url}/api/sessions")).await?.json().await?;
        let done = list.iter().filter(|s| s.state == shared::protocol::SessionState::Finished).count();
        ensure!(
            !list.iter().any(|s| matches!(
                s.state,
                shared::protocol::SessionState::Failed | shared::protocol::SessionState::Cancelled
            )),
            "a session did not finish: {list:?}"
        );
        if done == want {
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "{done} of {want} sessions finished within 240 s");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_scroll_area_inside_another_and_no_label_cut_without_a_tooltip() -> Result<()> {
    if !browser::available("no_scroll_area_inside_another_and_no_label_cut_without_a_tooltip") {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let web = recap_tests::repo_root().join("web");
    let host = Server::start(&dir.path().join("data"), &["--web", &web.to_string_lossy()]);
    let client = reqwest::Client::new();
    let mut ids = Vec::new();
    for salt in 0..3 {
        let path = dir.path().join(format!("big-{salt}.recap"));
        write_big_archive(&path, salt)?;
        let name = format!("transformer_backward_step_{salt}_with_every_panel_overflowing_the_window.recap");
        let (status, info) = crate::host::upload(&client, &host.url, &name, std::fs::read(&path)?).await;
        ensure!(status == 201, "upload {name}: {status} {info}");
        ids.push(info["id"].as_str().unwrap_or_default().to_string());
    }
    let archive = ids[0].clone();
    let mut replays = Vec::new();
    for _ in 0..SESSIONS {
        let body = serde_json::json!({ "archive": archive, "device": "cpu", "iterations": 1, "check": true });
        replays.push(
            crate::host::new_session(&client, &host.url, body).await["id"].as_str().unwrap_or_default().to_string(),
        );
    }
    let body = serde_json::json!({ "archive": archive, "kind": "compare", "device": "jit", "compare_with": "interp" });
    let compare =
        crate::host::new_session(&client, &host.url, body).await["id"].as_str().unwrap_or_default().to_string();
    wait_all_finished(&host.url, SESSIONS + 1).await?;
    let session: shared::protocol::SessionInfo =
        reqwest::get(format!("{}/api/sessions/{}", host.url, replays[0])).await?.json().await?;
    assert_eq!(session.passed, Some(true), "the archive's expected state is what its launches compute");

    let b = Browser::start().await?;
    let mut faults = Vec::new();
    for size in [(1600, 1000), (1000, 700)] {
        b.client.set_window_size(size.0 as u32, size.1 as u32).await?;
        b.open(&host.url).await?;
        b.wait_for("#session-list a.row", Duration::from_secs(10)).await?;
        b.wait_for("#archive-list .row[data-archive-id]", Duration::from_secs(10)).await?;
        faults_of(&b, "home", size, &mut faults).await?;

        b.open(&format!("{}/archives/{archive}#ops", host.url)).await?;
        b.wait_for("#ops-rows .row", Duration::from_secs(20)).await?;
        click(&b, "#ops-rows .row[data-op='3']").await?;
        faults_of(&b, "ops", size, &mut faults).await?;
        // Reached by its fragment, as a link to `#kernels` on the same page does.
        b.client.execute("location.hash = '#kernels'", vec![]).await?;
        b.wait_for("#kernel-list .row", Duration::from_secs(5)).await?;
        faults_of(&b, "kernels", size, &mut faults).await?;
        click(&b, "[data-tab='regions']").await?;
        b.wait_for("#region-list .row", Duration::from_secs(5)).await?;
        click(&b, &format!("#region-list .row[data-region='{COUNTERS}']")).await?;
        b.wait_for("#region-detail canvas.heatmap", Duration::from_secs(5)).await?;
        faults_of(&b, "regions", size, &mut faults).await?;
        click(&b, "[data-tab='bindings']").await?;
        b.wait_for(".table.bindings .tbody .row", Duration::from_secs(5)).await?;
        faults_of(&b, "bindings", size, &mut faults).await?;
        click(&b, "[data-tab='graph']").await?;
        b.wait_for("#graph-root .node", Duration::from_secs(20)).await?;
        faults_of(&b, "graph", size, &mut faults).await?;
        click(&b, "[data-tab='replay']").await?;
        b.wait_for("#r-sessions .table.sessions a.row", Duration::from_secs(10)).await?;
        faults_of(&b, "replay", size, &mut faults).await?;
        click(&b, "[data-tab='timeline']").await?;
        b.wait_for("#tl-svg", Duration::from_secs(20)).await?;
        faults_of(&b, "timeline", size, &mut faults).await?;

        b.open(&format!("{}/sessions/{}", host.url, replays[0])).await?;
        super::browser::wait_attr_eq(&b, "#r-state", "data-state", "finished", Duration::from_secs(30)).await?;
        b.wait_for("[data-out-region]", Duration::from_secs(20)).await?;
        faults_of(&b, "a replay's page", size, &mut faults).await?;
        b.open(&format!("{}/sessions/{compare}", host.url)).await?;
        super::browser::wait_attr_eq(&b, "#r-state", "data-state", "finished", Duration::from_secs(30)).await?;
        b.wait_for("#cmp-ops .row", Duration::from_secs(20)).await?;
        faults_of(&b, "a comparison's page", size, &mut faults).await?;
        b.screenshot(&format!("browser-layout-{}x{}", size.0, size.1)).await?;
    }
    b.close().await?;
    // The same fault on many rows is said once, with how many times.
    let mut seen: Vec<(String, usize)> = Vec::new();
    for f in faults {
        match seen.iter_mut().find(|(g, _)| *g == f) {
            Some((_, n)) => *n += 1,
            None => seen.push((f, 1)),
        }
    }
    let lines: Vec<String> =
        seen.iter().map(|(f, n)| if *n == 1 { f.clone() } else { format!("{f} ({n} times)") }).collect();
    assert!(lines.is_empty(), "{} layout faults:\n{}", lines.len(), lines.join("\n"));
    Ok(())
}
