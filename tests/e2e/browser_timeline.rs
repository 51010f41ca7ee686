//! The viewer's timeline and the graph's minimap in real headless Chromium: the Replay tab's spans
//! zoomed, panned and hovered, the heatmap's tips, the sessions list, and a large DAG folded with a
//! minimap that follows the view.

use std::time::Duration;

use anyhow::{Context, Result};
use recap_tests::browser::{self, Browser};

use crate::browser::{
    archives, click, press, seeded_host, select_value, start_cpu_replay, wait_attr_eq, write_archive,
};

/// The window of the timeline on screen: `(t0, t1)` in ms.
async fn timeline_window(b: &Browser) -> Result<(f64, f64)> {
    let svg = b.wait_for("#tl-svg", Duration::from_secs(5)).await?;
    let t0: f64 = svg.attr("data-t0").await?.unwrap_or_default().parse()?;
    let t1: f64 = svg.attr("data-t1").await?.unwrap_or_default().parse()?;
    Ok((t0, t1))
}

/// The op of the first timeline span matching `css` with a whole pixel near its middle that the
/// pointer can reach, and that pixel. WebDriver's pointer moves by whole pixels, so a span zoomed
/// or drawn narrower than the distance from its middle to the next pixel is passed over (a click
/// there lands beside it); a span cut by the edge of the view lies under the view's frame there.
async fn reachable_span(b: &Browser, css: &str) -> Result<(String, f64, f64)> {
    let found = b
        .client
        .execute(
            "const w = document.getElementById('tl-wrap').getBoundingClientRect(); \
             for (const e of document.querySelectorAll(arguments[0])) { const r = e.getBoundingClientRect(); \
               const mid = (lo, hi) => { const a = Math.ceil(lo), b = Math.floor(hi); return a <= b ? Math.floor((a + b) / 2) : null; }; \
               const x = mid(r.left, r.right), y = mid(r.top, r.bottom); \
               if (x !== null && y !== null && x > w.left && x < w.right && y > w.top && y < w.bottom && document.elementFromPoint(x, y)?.closest('.span') === e) \
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

/// Clicks a timeline span in view and gives its op with what the detail line then says (once it
/// names that op, or after two seconds).
async fn click_a_span(b: &Browser) -> Result<(String, String)> {
    let (op, x, y) = reachable_span(b, "#tl-svg .span").await?;
    click_at(b, x, y).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        let detail = b.text("#tl-detail").await?;
        if detail.starts_with(&format!("op {op} ")) || std::time::Instant::now() > deadline {
            return Ok((op, detail));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
    let host = seeded_host(dir.path())?;
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
    let (op, detail) = click_a_span(&b).await?;
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
    // Another tab by key, the pointer still where the heatmap was: its tooltip goes with it.
    b.client.execute("document.activeElement?.blur()", vec![]).await?;
    b.client.active_element().await?.send_keys("1").await?;
    b.wait_for("#tip[hidden]", Duration::from_secs(2)).await?;

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
    // Every verdict whole in its column ("not checked" was cut to "not check…").
    let cut = b
        .client
        .execute(
            "return [...document.querySelectorAll('#session-list .row > span:nth-child(2)')] \
             .filter(s => s.scrollWidth > s.clientWidth + 1).map(s => s.textContent)",
            vec![],
        )
        .await?;
    assert_eq!(cut, serde_json::json!([]), "cut verdicts");
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
    let label = chain.text().await?;
    assert!(label.contains("40 ops") && label.contains("from axpy_f32") && label.contains("to axpy_f32"), "{label}");
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
    // The folded chain's box is wider than its ops were: the body's toggle may now lie past the
    // view's edge, so the whole drawing is fitted first, as a user would.
    click(&b, "[data-graph='fit']").await?;
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

/// The Timeline tab, by URL, key and click: before any replay it says so and offers to start one;
/// that replay's timeline then fills it, and a fresh page's tab shows this archive's latest replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeline_tab_shows_the_latest_replay_or_offers_one() -> Result<()> {
    if !browser::available("the_timeline_tab_shows_the_latest_replay_or_offers_one") {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let host = seeded_host(dir.path())?;
    let stored = archives(&host.url).await?;
    let heat = stored.iter().find(|a| a.name == "heat-step.recap").map(|a| a.id.clone()).expect("seeded");

    // By URL: no replay has run, and the tab says so with a button that starts one.
    let b = Browser::start().await?;
    b.open(&format!("{}/archives/{heat}#timeline", host.url)).await?;
    wait_attr_eq(&b, "[data-tab='timeline']", "aria-selected", "true", Duration::from_secs(5)).await?;
    b.wait_for("#tl-tab-note [data-replay='timeline-start']", Duration::from_secs(10)).await?;
    assert!(b.text("#tl-tab-note").await?.contains("No replay has run on this archive yet"));
    assert!(b.client.find_all(fantoccini::Locator::Css("#tl-svg")).await?.is_empty(), "no timeline of nothing");
    click(&b, "#tl-tab-note [data-replay='timeline-start']").await?;
    wait_attr_eq(&b, "#tl-tab-note [data-state]", "data-state", "finished", Duration::from_secs(120)).await?;
    b.wait_for("#tl-svg .span", Duration::from_secs(5)).await?;
    assert!(b.client.current_url().await?.fragment() == Some("timeline"), "the tab stays on screen");
    let session = b.client.current_url().await?.path().trim_start_matches("/sessions/").to_string();
    b.screenshot("browser-timeline-tab").await?;
    b.close().await?;

    // A fresh page, by key from the Ops tab: this archive's latest replay, without starting another.
    let b = Browser::start().await?;
    b.open(&format!("{}/archives/{heat}", host.url)).await?;
    b.wait_for("[data-tab='ops'][aria-selected='true']", Duration::from_secs(10)).await?;
    press(&b, "body", '7').await?;
    wait_attr_eq(&b, "[data-tab='timeline']", "aria-selected", "true", Duration::from_secs(5)).await?;
    wait_attr_eq(&b, "#tl-tab-note [data-state]", "data-state", "finished", Duration::from_secs(10)).await?;
    assert!(b.text("#tl-tab-note").await?.contains(&session), "names the latest session {session}");
    b.wait_for("#tl-svg .span", Duration::from_secs(5)).await?;
    // By click: away and back, the timeline is still there.
    click(&b, "[data-tab='ops']").await?;
    click(&b, "[data-tab='timeline']").await?;
    b.wait_for("#tl-svg .span", Duration::from_secs(5)).await?;
    let sessions: Vec<shared::protocol::SessionInfo> =
        reqwest::get(format!("{}/api/sessions?archive={heat}", host.url)).await?.json().await?;
    assert_eq!(sessions.len(), 1, "opening the tab started nothing: {sessions:?}");
    b.close().await?;
    Ok(())
}

/// The first view of a large graph is readable: its labels are drawn (not hidden for a small
/// scale), every node's text lies inside its box, and a label cut with an ellipsis is whole in
/// the node's tooltip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_view_of_a_large_graph_fits_its_labels_in_their_boxes() -> Result<()> {
    if !browser::available("the_first_view_of_a_large_graph_fits_its_labels_in_their_boxes") {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let host = seeded_host(dir.path())?;
    let stored = archives(&host.url).await?;
    let b = Browser::start().await?;
    for name in ["dag-8-chains.recap", "heat-step.recap"] {
        let id = stored.iter().find(|a| a.name == name).map(|a| a.id.clone()).expect("seeded");
        b.open(&format!("{}/archives/{id}#graph", host.url)).await?;
        b.wait_for("#graph-root .node text", Duration::from_secs(10)).await?;
        let far = b.client.find_all(fantoccini::Locator::Css("svg.graph.lod-far")).await?;
        assert!(far.is_empty(), "{name}: the first view draws its labels");
        let measured = b
            .client
            .execute(
                "const out = []; \
                 for (const n of document.querySelectorAll('#graph-root .node')) { \
                   const box = [...n.querySelectorAll(':scope > rect')].filter(r => !r.classList.contains('stack')).pop(); \
                   if (!box) continue; const b = box.getBBox(); \
                   for (const t of n.querySelectorAll(':scope > text')) { const r = t.getBBox(); \
                     const tip = n.querySelector(':scope > title')?.textContent ?? ''; \
                     const whole = !t.textContent.endsWith('…') || tip.includes(t.textContent.slice(0, -1)); \
                     out.push([t.textContent, r.x >= b.x - 0.5 && r.x + r.width <= b.x + b.width + 0.5, r.width, whole, tip]); } } \
                 return out;",
                vec![],
            )
            .await?;
        let labels: Vec<(String, bool, f64, bool, String)> = serde_json::from_value(measured)?;
        assert!(labels.len() >= 2, "{name}: labels measured: {labels:?}");
        let over: Vec<_> = labels.iter().filter(|l| !l.1).collect();
        assert!(over.is_empty(), "{name}: labels past their boxes: {over:?}");
        assert!(labels.iter().all(|l| l.2 > 0.0), "{name}: every label is drawn: {labels:?}");
        let cut: Vec<_> = labels.iter().filter(|l| !l.3).collect();
        assert!(cut.is_empty(), "{name}: cut labels whole in their tooltips: {cut:?}");
        let empty: Vec<_> = labels.iter().filter(|l| l.0.trim_end_matches('…').trim().chars().count() < 2).collect();
        assert!(empty.is_empty(), "{name}: labels cut to nothing: {empty:?}");
        // A folded chain says how many ops it holds and names the ops at its two ends (a kernel's
        // name, or the op's kind), each named in its tooltip too.
        let folds = b
            .client
            .execute(
                "return [...document.querySelectorAll('#graph-root .node.fold')].map(n => [n.dataset.count,                  n.querySelector('text.t').textContent, n.querySelector('text[data-end=first]')?.textContent ?? '',                  n.querySelector('text[data-end=last]')?.textContent ?? '', n.querySelector(':scope > title').textContent])",
                vec![],
            )
            .await?;
        let folds: Vec<(String, String, String, String, String)> = serde_json::from_value(folds)?;
        if name == "heat-step.recap" {
            assert!(!folds.is_empty(), "{name}: its long chain opens folded");
        }
        if name == "dag-8-chains.recap" {
            // The header counts the kernels ops launch, and apart those its modules only define.
            let stats = b
                .client
                .execute("return [...document.querySelectorAll('.stat')].map(s => s.textContent)", vec![])
                .await?;
            let stats: Vec<String> = serde_json::from_value(stats)?;
            assert!(stats.iter().any(|s| s == "1 kernel launched (5 unused)"), "{name}: {stats:?}");
        }
        for (count, title, from, to, tip) in &folds {
            assert!(title.ends_with(&format!(" · {count} ops")), "{name}: {title} says its count {count}");
            for (end, word) in [(from, "from "), (to, "to ")] {
                let kernel = end.strip_prefix(word).unwrap_or_default().trim_end_matches('…');
                assert!(kernel.chars().count() >= 3 && tip.contains(kernel), "{name}: {end:?} names an op of {tip}");
            }
        }
        b.screenshot(&format!("browser-graph-first-view-{}", name.trim_end_matches(".recap"))).await?;
    }
    b.close().await?;
    Ok(())
}
