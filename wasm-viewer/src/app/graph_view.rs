//! The Graph tab: the op DAG from `shared::plan`, laid out in Rust ([`crate::graph`]), drawn as
//! SVG, with pan (drag, arrow keys) and zoom (wheel around the cursor, + and -, 0 to fit), a
//! minimap of the whole drawing (click or drag it to move there), and folding: long chains and big
//! while/if bodies are one node until clicked open; "expand all" and "fold all" start over.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use shared::archive::{Archive, Op};
use wasm_bindgen::JsCast;

use super::dom::{self, by_id, document, listen, set_html};
use super::with_app;
use crate::graph::{self, DagInput, FoldKey, FoldMode, Folds, MiniBox, NodeLabel};
use crate::model::{count, esc};

/// The minimap's largest size in CSS pixels.
const MINI_W: f64 = 200.0;
const MINI_H: f64 = 150.0;
/// Its smallest side: a long chain's minimap is still wide enough to aim at.
const MINI_MIN: f64 = 64.0;

thread_local! {
    /// Pan and zoom: `(tx, ty, scale)`.
    static VIEW: Cell<(f64, f64, f64)> = const { Cell::new((0.0, 0.0, 1.0)) };
    static SIZE: Cell<(f64, f64)> = const { Cell::new((0.0, 0.0)) };
    static DRAG: Cell<Option<(f64, f64)>> = const { Cell::new(None) };
    /// A drag that started on the minimap.
    static MINI_DRAG: Cell<bool> = const { Cell::new(false) };
    /// The plan's DAGs for the open archive, computed once per archive.
    static DAGS: RefCell<Option<Dags>> = const { RefCell::new(None) };
    /// What is folded, for the archive it was chosen in.
    static FOLDS: RefCell<(usize, Folds)> = RefCell::new((0, Folds::default()));
    /// What the drawing shows: each node's box (for the minimap) and the ops folded away, with the
    /// node that holds each.
    static DRAWN: RefCell<Drawn> = RefCell::new((Vec::new(), HashMap::new()));
    /// Each drawn node's element (in the order of [`DRAWN`]'s boxes) and whether it is culled now.
    static CULL: RefCell<(Vec<web_sys::Element>, Vec<bool>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// The archive (its key), its DAGs and its dependency edge count.
type Dags = (usize, Rc<Vec<DagInput>>, usize);
/// Every drawn node's box with its kind, and the ops folded away with what holds each.
type Drawn = (Vec<(MiniBox, &'static str)>, HashMap<u32, FoldKey>);

fn archive_key(open: &super::Open) -> usize {
    Rc::as_ptr(&open.loaded) as usize
}

fn dags_for(open: &super::Open) -> (Rc<Vec<DagInput>>, usize) {
    let key = archive_key(open);
    if let Some((k, d, e)) = DAGS.with(|c| c.borrow().clone()) {
        if k == key {
            return (d, e);
        }
    }
    let plan = shared::plan::Plan::build(open.loaded.archive());
    let dags: Vec<DagInput> = plan
        .dags
        .iter()
        .map(|d| DagInput {
            owner: d.owner,
            nodes: d.nodes.clone(),
            edges: d.edges.iter().map(|e| (e.from, e.to)).collect(),
            devices: if plan.device_count > 1 {
                d.nodes.iter().map(|&n| plan.device_of(n)).collect()
            } else {
                Vec::new()
            },
        })
        .collect();
    let edges = plan.edge_count();
    let dags = Rc::new(dags);
    DAGS.with(|c| *c.borrow_mut() = Some((key, dags.clone(), edges)));
    (dags, edges)
}

/// The folds of the open archive (fresh ones for an archive opened since).
fn with_folds<R>(open: &super::Open, f: impl FnOnce(&mut Folds) -> R) -> R {
    let key = archive_key(open);
    FOLDS.with(|c| {
        let mut c = c.borrow_mut();
        if c.0 != key {
            *c = (key, Folds::default());
        }
        f(&mut c.1)
    })
}

/// The top-level DAG's edges of the open archive (what the timeline's critical path follows).
pub fn top_level_edges() -> Option<Vec<(u32, u32)>> {
    with_app(|app| {
        let open = app.open.as_ref()?;
        let (dags, _) = dags_for(open);
        dags.iter().find(|d| d.owner.is_none()).map(|d| d.edges.clone())
    })
}

/// An op's kind as the page's classes name it, without building its whole row.
fn kind_of(a: &Archive, op: u32) -> &'static str {
    match a.op(op) {
        Op::Launch(_) => "launch",
        Op::Copy(_) => "copy",
        Op::Memset(_) => "memset",
        Op::Alloc(_) => "alloc",
        Op::Free(_) => "free",
        Op::While { .. } => "while",
        Op::If { .. } => "if",
        _ => "marker",
    }
}

fn label(a: &Archive, op: u32) -> NodeLabel {
    let row = crate::model::op_row(a, op);
    match a.op(op) {
        Op::Launch(_) => {
            NodeLabel { kind: row.kind, title: format!("{op} {}", row.kernel), sub: row.dims, name: row.kernel.clone() }
        }
        _ => NodeLabel { kind: row.kind, title: format!("{op} {}", row.kind), sub: row.detail, name: row.kind.into() },
    }
}

pub fn render() {
    let html = with_app(|app| {
        let open = app.open.as_ref()?;
        let a = open.loaded.archive();
        let (_, edge_count) = dags_for(open);
        Some(format!(
            r#"<div class="graph-view">
  <div class="toolbar"><span class="count">{} · {} · <span id="g-layers"></span></span><span id="g-omitted"></span>
    <button data-graph="fit" title="fit (0)">Fit</button><button data-graph="in" title="zoom in (+)">+</button><button data-graph="out" title="zoom out (−)">−</button>
    <button data-graph="expand" title="draw every op (e)">Expand all</button><button data-graph="fold" title="fold every body and long chain (c)">Fold all</button>
    <input id="g-search" type="search" placeholder="find a kernel (/)" aria-label="find ops by kernel name" style="width:180px"><span class="count" id="g-matches"></span>
    <span class="hint">drag to pan · wheel to zoom · click an op for its details, a folded node to open it · n/N next/previous match · j/k next/previous op · <span id="g-time"></span></span></div>
  <div class="graph-main">
  <div class="graph-wrap" id="graph-wrap" tabindex="0" aria-label="op dependency graph">
    <svg id="graph-svg" class="graph" width="100%" height="100%">
      <defs><marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0L8,4L0,8z" class="arrowhead"/></marker></defs>
      <g id="graph-root"></g>
    </svg>
    <div class="minimap" id="minimap" title="the whole graph: click or drag to move there"><canvas id="minimap-canvas"></canvas><div class="minimap-view" id="minimap-view"></div></div>
  </div>
  <aside class="detail graph-pane" id="graph-pane" aria-label="op details"><p class="muted">Click an op for its details.</p></aside>
  </div>
  <div class="graph-legend">{}</div>
</div>"#,
            count(a.op_count() as u64, "op", "ops"),
            count(edge_count as u64, "dependency edge", "dependency edges"),
            legend()
        ))
    });
    if let Some(h) = html {
        set_html("main-view", &h);
        draw(true);
        if let Some(op) = with_app(|app| app.open.as_ref().and_then(|o| o.selected)) {
            select_node(op, false);
        }
    }
}

/// Lays the graph out as folded now and draws it, the minimap with it; the view stays where it is,
/// or with `fit` shows the whole drawing (set before the drawing enters the page, so that labels
/// too small to read are never laid out).
fn draw(fit: bool) {
    dom::mark("recap:graph-draw-start");
    let done = with_app(|app| {
        let open = app.open.as_ref()?;
        let a = open.loaded.archive();
        let t0 = dom::now_ms();
        let (dags, _) = dags_for(open);
        let layout = with_folds(open, |f| graph::layout_folded(&dags, None, f));
        let t1 = dom::now_ms();
        let svg = graph::to_svg(&layout, &|op| label(a, op), open.selected);
        let hidden = graph::hidden(&layout);
        let boxes: Vec<(MiniBox, &'static str)> =
            graph::boxes(&layout).into_iter().map(|b| (b, kind_of(a, b.op))).collect();
        let t2 = dom::now_ms();
        SIZE.with(|s| s.set((layout.w, layout.h)));
        let omitted = if layout.omitted > 0 {
            format!(
                r#"<span class="warn">showing the first {} top-level ops of {}</span>"#,
                graph::MAX_NODES,
                graph::MAX_NODES + layout.omitted
            )
        } else {
            String::new()
        };
        let folded = hidden.len();
        DRAWN.with(|d| *d.borrow_mut() = (boxes, hidden));
        Some((svg, layout.layers, folded, omitted, t1 - t0, t2 - t1))
    });
    let Some((svg, layers, folded, omitted, layout_ms, svg_ms)) = done else { return };
    if fit {
        fit_view();
    }
    set_lod();
    let t = dom::now_ms();
    // SVG elements are not HTML elements: set through `Element`.
    if let Some(root) = document().get_element_by_id("graph-root") {
        root.set_inner_html(&svg);
        collect_nodes(&root);
    }
    let dom_ms = dom::now_ms() - t;
    let folded = if folded > 0 { format!(" · {} folded", count(folded as u64, "op", "ops")) } else { String::new() };
    set_html("g-layers", &format!("{} at top level{folded}", count(layers as u64, "layer", "layers")));
    set_html("g-omitted", &omitted);
    set_html("g-time", &format!("laid out in {layout_ms:.0} ms, drawn in {:.0} ms", svg_ms + dom_ms));
    if let Some(svg) = document().get_element_by_id("graph-svg") {
        let _ = svg.set_attribute("data-drawn-nodes", &DRAWN.with(|d| d.borrow().0.len()).to_string());
    }
    draw_minimap();
    apply();
    // A search stays marked across redraws.
    if let Some(q) = document()
        .get_element_by_id("g-search")
        .and_then(|e| e.dyn_into::<web_sys::HtmlInputElement>().ok())
        .map(|i| i.value())
    {
        if !q.trim().is_empty() {
            let current = MATCHES.with(|m| m.borrow().1);
            search(&q);
            MATCHES.with(|m| m.borrow_mut().1 = current);
        }
    }
    dom::mark("recap:graph-drawn");
    dom::measure("recap:graph-draw", "recap:graph-draw-start", "recap:graph-drawn");
}

/// The colour of an op kind on the minimap (the page's `--launch`, `--copy`, … colours).
fn kind_colour(kind: &str) -> &'static str {
    match kind {
        "launch" => "#1f6feb",
        "copy" => "#8250df",
        "memset" => "#b26a00",
        "alloc" => "#1b7f3b",
        "free" => "#6b7280",
        "while" | "if" => "#c2185b",
        _ => "#00838f",
    }
}

/// The minimap's geometry for the drawing's size: the scale, the canvas's size, and where the
/// drawing starts on it (a narrow or flat drawing is centred on a canvas of some size).
struct Mini {
    k: f64,
    w: f64,
    h: f64,
    x: f64,
    y: f64,
}

fn mini_geometry() -> Mini {
    let (w, h) = SIZE.with(|s| s.get());
    if w <= 0.0 || h <= 0.0 {
        return Mini { k: 0.0, w: 0.0, h: 0.0, x: 0.0, y: 0.0 };
    }
    let k = (MINI_W / w).min(MINI_H / h);
    let (cw, ch) = ((w * k).max(MINI_MIN), (h * k).max(MINI_MIN));
    Mini { k, w: cw, h: ch, x: (cw - w * k) / 2.0, y: (ch - h * k) / 2.0 }
}

/// Draws every node of the drawing, shrunk, into the minimap's canvas.
fn draw_minimap() {
    let Some(canvas) = document().get_element_by_id("minimap-canvas") else { return };
    let Ok(canvas) = canvas.dyn_into::<web_sys::HtmlCanvasElement>() else { return };
    let Mini { k, w: cw, h: ch, x: mx, y: my } = mini_geometry();
    let dpr = dom::window().device_pixel_ratio().max(1.0);
    canvas.set_width((cw * dpr).round() as u32);
    canvas.set_height((ch * dpr).round() as u32);
    let style = canvas.style();
    let _ = style.set_property("width", &format!("{cw:.0}px"));
    let _ = style.set_property("height", &format!("{ch:.0}px"));
    let Some(ctx) =
        canvas.get_context("2d").ok().flatten().and_then(|c| c.dyn_into::<web_sys::CanvasRenderingContext2d>().ok())
    else {
        return;
    };
    let _ = ctx.set_transform(dpr, 0.0, 0.0, dpr, 0.0, 0.0);
    ctx.clear_rect(0.0, 0.0, cw, ch);
    let drawn = DRAWN.with(|d| {
        let d = d.borrow();
        for (b, kind) in &d.0 {
            let (x, y, w, h) = (mx + b.x * k, my + b.y * k, (b.w * k).max(1.0), (b.h * k).max(1.0));
            if b.frame {
                ctx.set_stroke_style_str(kind_colour(kind));
                ctx.set_line_width(1.0);
                ctx.stroke_rect(x + 0.5, y + 0.5, w - 1.0, h - 1.0);
            } else {
                ctx.set_fill_style_str(kind_colour(kind));
                ctx.fill_rect(x, y, w, h);
            }
        }
        d.0.len()
    });
    let _ = canvas.set_attribute("data-drawn", &drawn.to_string());
    place_minimap_view();
}

/// Moves the minimap's outline of what the graph view shows.
fn place_minimap_view() {
    let (Some(view), Some(wrap)) = (by_id("minimap-view"), by_id("graph-wrap")) else { return };
    let Mini { k, w: cw, h: ch, x: mx, y: my } = mini_geometry();
    let (tx, ty, s) = VIEW.with(|v| v.get());
    let (vw, vh) = (wrap.client_width() as f64, wrap.client_height() as f64);
    // The part of the drawing in view, in its coordinates, then in the minimap's (clipped to it).
    let (x0, y0) = ((mx - tx / s * k).max(0.0), (my - ty / s * k).max(0.0));
    let (x1, y1) = ((mx + (vw - tx) / s * k).min(cw), (my + (vh - ty) / s * k).min(ch));
    let style = view.style();
    let _ = style.set_property("left", &format!("{x0:.1}px"));
    let _ = style.set_property("top", &format!("{y0:.1}px"));
    let _ = style.set_property("width", &format!("{:.1}px", (x1 - x0).max(0.0)));
    let _ = style.set_property("height", &format!("{:.1}px", (y1 - y0).max(0.0)));
}

/// Centres the view on the point of the minimap under the pointer.
fn minimap_go(ev: &web_sys::MouseEvent) {
    let (Some(canvas), Some(wrap)) = (by_id("minimap-canvas"), by_id("graph-wrap")) else { return };
    let m = mini_geometry();
    if m.k <= 0.0 {
        return;
    }
    let r = canvas.get_bounding_client_rect();
    let (gx, gy) = ((ev.client_x() as f64 - r.left() - m.x) / m.k, (ev.client_y() as f64 - r.top() - m.y) / m.k);
    let (vw, vh) = (wrap.client_width() as f64, wrap.client_height() as f64);
    VIEW.with(|v| {
        let s = v.get().2;
        v.set((vw / 2.0 - gx * s, vh / 2.0 - gy * s, s));
    });
    apply();
}

/// Where the element `css` of the drawing sits (its first rect's x and y), in drawing coordinates.
fn rect_xy(css: &str) -> Option<(f64, f64)> {
    let rect = document().query_selector(&format!("#graph-root {css} > rect:not(.stack)")).ok().flatten()?;
    let num = |a: &str| rect.get_attribute(a).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    Some((num("x"), num("y")))
}

/// Opens or folds `key`, keeping what was clicked where it was on screen.
fn toggle(key: FoldKey, open: bool) {
    let before = match key {
        FoldKey::Body(op) => rect_xy(&format!("[data-node='{op}']")),
        FoldKey::Chain(op) => {
            rect_xy(&format!("[data-fold='{}']", key.id())).or_else(|| rect_xy(&format!("[data-node='{op}']")))
        }
    };
    let set = with_app(|app| {
        let open_archive = app.open.as_ref()?;
        with_folds(open_archive, |f| f.set(key, open));
        Some(())
    });
    if set.is_none() {
        return;
    }
    draw(false);
    let after = match (key, open) {
        (FoldKey::Body(op), _) | (FoldKey::Chain(op), true) => rect_xy(&format!("[data-node='{op}']")),
        (FoldKey::Chain(_), false) => rect_xy(&format!("[data-fold='{}']", key.id())),
    };
    if let (Some((bx, by)), Some((ax, ay))) = (before, after) {
        VIEW.with(|v| {
            let (tx, ty, s) = v.get();
            v.set((tx + (bx - ax) * s, ty + (by - ay) * s, s));
        });
        apply();
    }
    super::set_status(&format!("{} {}", if open { "opened" } else { "folded" }, describe(key)));
}

fn describe(key: FoldKey) -> String {
    match key {
        FoldKey::Body(op) => format!("the body of op {op}"),
        FoldKey::Chain(op) => format!("the chain from op {op}"),
    }
}

/// Starts folding over: every op drawn (`Open`), or every body and long chain folded.
fn fold_all(mode: FoldMode) {
    let done = with_app(|app| {
        let open = app.open.as_ref()?;
        with_folds(open, |f| f.reset(mode));
        Some(())
    });
    if done.is_some() {
        draw(true);
    }
}

/// Opens whatever folds `op` away; says whether the drawing changed.
fn reveal(op: u32) -> bool {
    if !DRAWN.with(|d| d.borrow().1.contains_key(&op)) {
        return false;
    }
    let opened = with_app(|app| {
        let open = app.open.as_ref()?;
        let (dags, _) = dags_for(open);
        Some(with_folds(open, |f| graph::reveal(&dags, f, op)))
    });
    if opened == Some(true) {
        draw(false);
        true
    } else {
        false
    }
}

thread_local! {
    /// The ops whose kernel matches the search, in op order, and the one last jumped to.
    static MATCHES: RefCell<(Vec<u32>, Option<usize>)> = const { RefCell::new((Vec::new(), None)) };
}

/// Selects `op`: outlined in the graph, its details (and the ops it waits for and that wait for it)
/// in the side pane; `center` brings it to the middle of the view.
pub fn select_node(op: u32, center: bool) {
    // An op folded away is drawn first, and then brought into view.
    let center = reveal(op) || center;
    let pane = with_app(|app| {
        let open = app.open.as_mut()?;
        open.selected = Some(op);
        let a = open.loaded.archive();
        let (dags, _) = dags_for(open);
        let (mut before, mut after) = (Vec::new(), Vec::new());
        for d in dags.iter() {
            for &(f, t) in &d.edges {
                if t == op {
                    before.push(f);
                }
                if f == op {
                    after.push(t);
                }
            }
        }
        let links = |ops: &[u32]| -> String {
            if ops.is_empty() {
                return r#"<span class="muted">none</span>"#.to_string();
            }
            ops.iter()
                .map(|o| {
                    let row = crate::model::op_row(a, *o);
                    let name = if row.kernel.is_empty() { row.kind.to_string() } else { row.kernel.clone() };
                    format!(r#"<button class="oplink" data-goto-node="{o}">{o} {}</button>"#, esc(&name))
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        Some(format!(
            r#"{}<h4>waits for</h4><div class="oplinks" id="g-before">{}</div><h4>needed by</h4><div class="oplinks" id="g-after">{}</div>"#,
            super::ops::detail_html(a, op),
            links(&before),
            links(&after)
        ))
    });
    let Some(pane) = pane else { return };
    set_html("graph-pane", &pane);
    if let Ok(list) = document().query_selector_all("#graph-root .node.sel") {
        for i in 0..list.length() {
            if let Some(e) = list.item(i).and_then(|n| n.dyn_into::<web_sys::Element>().ok()) {
                let _ = e.class_list().remove_1("sel");
            }
        }
    }
    let node = document().query_selector(&format!("#graph-root [data-node='{op}']")).ok().flatten();
    if let Some(node) = &node {
        let _ = node.class_list().add_1("sel");
    }
    if let (true, Some(node), Some(wrap)) = (center, node, by_id("graph-wrap")) {
        let Some(rect) = node.query_selector("rect").ok().flatten() else { return };
        let num = |a: &str| rect.get_attribute(a).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        let (cx, cy) = (num("x") + num("width") / 2.0, num("y") + num("height") / 2.0);
        let (vw, vh) = (wrap.client_width() as f64, wrap.client_height() as f64);
        VIEW.with(|v| {
            // Close enough to read the node's label.
            let s = v.get().2.max(0.8);
            v.set((vw / 2.0 - cx * s, vh / 2.0 - cy * s, s));
        });
        apply();
    }
    super::set_status(&format!("op {op} selected (press 1 to see it in the op list)"));
}

/// Marks the ops whose kernel name contains `query` (any case) and says how many there are.
fn search(query: &str) {
    let q = query.trim().to_lowercase();
    let found: Vec<u32> = if q.is_empty() {
        Vec::new()
    } else {
        with_app(|app| {
            let open = app.open.as_ref()?;
            let a = open.loaded.archive();
            Some(
                (0..a.op_count() as u32)
                    .filter(
                        |&op| matches!(a.op(op), Op::Launch(l) if a.kernel(l.kernel).name.to_lowercase().contains(&q)),
                    )
                    .collect(),
            )
        })
        .unwrap_or_default()
    };
    if let Ok(list) = document().query_selector_all("#graph-root .node.match") {
        for i in 0..list.length() {
            if let Some(e) = list.item(i).and_then(|n| n.dyn_into::<web_sys::Element>().ok()) {
                let _ = e.class_list().remove_1("match");
            }
        }
    }
    // A match folded away marks the node that holds it.
    let folded_keys: Vec<Option<FoldKey>> =
        DRAWN.with(|d| found.iter().map(|op| d.borrow().1.get(op).copied()).collect());
    let (mut drawn, mut folded) = (0, 0);
    for (op, key) in found.iter().zip(folded_keys) {
        let css = match key {
            Some(k) => {
                folded += 1;
                format!("#graph-root [data-fold='{}']", k.id())
            }
            None => format!("#graph-root [data-node='{op}']"),
        };
        if let Ok(Some(e)) = document().query_selector(&css) {
            let _ = e.class_list().add_1("match");
            drawn += 1;
        }
    }
    let text = match (q.is_empty(), found.len()) {
        (true, _) => String::new(),
        (false, 0) => "no match".to_string(),
        (false, n) if drawn < n => format!("{n} matches, {drawn} drawn"),
        (false, 1) if folded > 0 => "1 match, folded".to_string(),
        (false, 1) => "1 match".to_string(),
        (false, n) if folded > 0 => format!("{n} matches, {folded} folded"),
        (false, n) => format!("{n} matches"),
    };
    set_html("g-matches", &esc(&text));
    if let Some(w) = by_id("graph-wrap") {
        let _ = w.toggle_attribute_with_force("data-searching", !q.is_empty());
    }
    MATCHES.with(|m| *m.borrow_mut() = (found, None));
}

/// Jumps to the next (or previous) match of the search.
fn jump(forward: bool) {
    let target = MATCHES.with(|m| {
        let mut m = m.borrow_mut();
        let n = m.0.len();
        if n == 0 {
            return None;
        }
        let i = match (m.1, forward) {
            (None, true) => 0,
            (None, false) => n - 1,
            (Some(i), true) => (i + 1) % n,
            (Some(i), false) => (i + n - 1) % n,
        };
        m.1 = Some(i);
        Some(m.0[i])
    });
    if let Some(op) = target {
        select_node(op, true);
    }
}

/// Selects the op before or after the selected one, in op order.
fn step(delta: i64) {
    let next = with_app(|app| {
        let open = app.open.as_ref()?;
        let n = open.loaded.archive().op_count() as i64;
        if n == 0 {
            return None;
        }
        let cur = open.selected.map(|s| s as i64).unwrap_or(-delta.signum().min(0) - 1);
        Some((cur + delta).clamp(0, n - 1) as u32)
    });
    if let Some(op) = next {
        select_node(op, true);
    }
}

fn legend() -> String {
    crate::model::OP_KINDS
        .iter()
        .map(|k| format!(r#"<span class="lg k-{k}"><i></i>{}</span>"#, esc(k)))
        .collect::<Vec<_>>()
        .join("")
}

fn apply() {
    let (tx, ty, s) = VIEW.with(|v| v.get());
    if let Some(g) = document().get_element_by_id("graph-root") {
        let _ = g.set_attribute("transform", &format!("translate({tx:.1},{ty:.1}) scale({s:.4})"));
    }
    // Culled before the labels appear, so that crossing the label scale lays out only the text in view.
    cull();
    set_lod();
    place_minimap_view();
}

pub fn fit() {
    fit_view();
    apply();
}

/// Sets the view to show the whole drawing (without applying it).
fn fit_view() {
    let Some(wrap) = by_id("graph-wrap") else { return };
    let (w, h) = SIZE.with(|s| s.get());
    let (vw, vh) = (wrap.client_width() as f64, wrap.client_height() as f64);
    if w <= 0.0 || vw <= 0.0 {
        return;
    }
    let s = ((vw - 40.0) / w).min((vh - 40.0) / h).clamp(0.02, 1.5);
    VIEW.with(|v| v.set(((vw - w * s) / 2.0, 20.0, s)));
}

/// Keeps the drawn nodes' elements, in the order of their boxes (the SVG nests them as
/// [`graph::boxes`] walks them), all shown.
fn collect_nodes(root: &web_sys::Element) {
    let mut elements = Vec::new();
    if let Ok(list) = root.query_selector_all(".node") {
        for i in 0..list.length() {
            if let Some(e) = list.item(i).and_then(|n| n.dyn_into::<web_sys::Element>().ok()) {
                elements.push(e);
            }
        }
    }
    // A drawing whose elements do not match its boxes one for one is never culled.
    if elements.len() != DRAWN.with(|d| d.borrow().0.len()) {
        elements.clear();
    }
    let shown = vec![false; elements.len()];
    CULL.with(|c| *c.borrow_mut() = (elements, shown));
}

/// How far outside the view, in screen pixels, nodes keep their labels: a short pan shows no blanks.
const CULL_MARGIN: f64 = 300.0;

/// Hides the labels of nodes far outside the view (`culled`), and shows them again when they come
/// near. Text is what a frame of a big drawing costs, and a thousand labels laid out at once are
/// the frames that stutter; boxes and edges stay, so the shape of the graph never changes. Only the
/// nodes whose state changes are touched.
fn cull() {
    let Some(wrap) = by_id("graph-wrap") else { return };
    let (tx, ty, s) = VIEW.with(|v| v.get());
    let (vw, vh) = (wrap.client_width() as f64, wrap.client_height() as f64);
    if vw <= 0.0 || vh <= 0.0 || s <= 0.0 {
        // Not laid out yet (a hidden tab): nothing can be said to be out of view.
        return;
    }
    // The view in the drawing's coordinates.
    let (x0, y0) = ((-tx - CULL_MARGIN) / s, (-ty - CULL_MARGIN) / s);
    let (x1, y1) = ((vw - tx + CULL_MARGIN) / s, (vh - ty + CULL_MARGIN) / s);
    DRAWN.with(|d| {
        let drawn = d.borrow();
        CULL.with(|c| {
            let (elements, culled) = &mut *c.borrow_mut();
            for ((element, was), (b, _)) in elements.iter().zip(culled.iter_mut()).zip(drawn.0.iter()) {
                let out = b.x + b.w < x0 || b.x > x1 || b.y + b.h < y0 || b.y > y1;
                if out != *was {
                    *was = out;
                    let _ = element.class_list().toggle_with_force("culled", out);
                }
            }
        });
    });
}

/// Below this scale labels are too small to read: they are not drawn at all (`lod-far`), which
/// is what keeps zooming a thousand-op drawing smooth (text is most of the cost of a frame).
const LABEL_SCALE: f64 = 0.4;

/// Shows or hides the labels for the current scale.
fn set_lod() {
    let s = VIEW.with(|v| v.get().2);
    if let Some(svg) = document().get_element_by_id("graph-svg") {
        let far = s < LABEL_SCALE;
        if svg.class_list().contains("lod-far") != far {
            let _ = svg.class_list().toggle_with_force("lod-far", far);
        }
    }
}

fn zoom_at(factor: f64, cx: f64, cy: f64) {
    VIEW.with(|v| {
        let (tx, ty, s) = v.get();
        let ns = (s * factor).clamp(0.02, 4.0);
        let k = ns / s;
        v.set((cx - (cx - tx) * k, cy - (cy - ty) * k, ns));
    });
    apply();
}

fn pan(dx: f64, dy: f64) {
    VIEW.with(|v| {
        let (tx, ty, s) = v.get();
        v.set((tx + dx, ty + dy, s));
    });
    apply();
}

fn in_graph(ev: &web_sys::Event) -> bool {
    ev.target()
        .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
        .and_then(|e| e.closest("#graph-wrap").ok().flatten())
        .is_some()
}

pub fn wire() {
    let doc: web_sys::EventTarget = document().into();
    let wheel_opts = web_sys::AddEventListenerOptions::new();
    wheel_opts.set_passive(false);
    let cb = wasm_bindgen::closure::Closure::<dyn FnMut(web_sys::WheelEvent)>::new(|ev: web_sys::WheelEvent| {
        if !in_graph(&ev) {
            return;
        }
        ev.prevent_default();
        let Some(wrap) = by_id("graph-wrap") else { return };
        let r = wrap.get_bounding_client_rect();
        let factor = (-ev.delta_y() * 0.0015).exp();
        zoom_at(factor, ev.client_x() as f64 - r.left(), ev.client_y() as f64 - r.top());
    });
    let _ = doc.add_event_listener_with_callback_and_add_event_listener_options(
        "wheel",
        cb.as_ref().unchecked_ref(),
        &wheel_opts,
    );
    cb.forget();
    listen(&doc, "mousedown", false, |ev| {
        if !in_graph(&ev) {
            return;
        }
        let on_minimap = ev
            .target()
            .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
            .and_then(|e| e.closest("#minimap").ok().flatten())
            .is_some();
        let ev: web_sys::MouseEvent = ev.unchecked_into();
        if on_minimap {
            ev.prevent_default();
            MINI_DRAG.with(|d| d.set(true));
            minimap_go(&ev);
            return;
        }
        DRAG.with(|d| d.set(Some((ev.client_x() as f64, ev.client_y() as f64))));
    });
    listen(&doc, "mousemove", false, |ev| {
        if MINI_DRAG.with(|d| d.get()) {
            minimap_go(ev.unchecked_ref());
            return;
        }
        let Some((x, y)) = DRAG.with(|d| d.get()) else { return };
        let ev: web_sys::MouseEvent = ev.unchecked_into();
        let (nx, ny) = (ev.client_x() as f64, ev.client_y() as f64);
        if let Some(w) = by_id("graph-wrap") {
            let _ = w.class_list().add_1("panning");
        }
        DRAG.with(|d| d.set(Some((nx, ny))));
        pan(nx - x, ny - y);
    });
    listen(&doc, "mouseup", false, |_| {
        DRAG.with(|d| d.set(None));
        MINI_DRAG.with(|d| d.set(false));
        if let Some(w) = by_id("graph-wrap") {
            let _ = w.class_list().remove_1("panning");
        }
    });
    listen(&doc, "click", false, |ev| {
        if let Some(el) = dom::closest_with(&ev, "data-graph") {
            match el.get_attribute("data-graph").as_deref() {
                Some("fit") => fit(),
                Some("in") => zoom_center(1.25),
                Some("out") => zoom_center(0.8),
                Some("expand") => fold_all(FoldMode::Open),
                Some("fold") => fold_all(FoldMode::Folded),
                _ => {}
            }
        } else if let Some(el) = dom::closest_with(&ev, "data-fold") {
            // A folded node opens (a collapsed body is also selected); an open one's toggle folds it.
            let Some(key) = el.get_attribute("data-fold").and_then(|k| FoldKey::parse(&k)) else { return };
            let open = el.get_attribute("data-open").as_deref() == Some("1");
            toggle(key, !open);
            if let (FoldKey::Body(op), false) = (key, open) {
                select_node(op, false);
            }
        } else if let Some(link) = dom::closest_with(&ev, "data-goto-node") {
            if let Some(id) = link.get_attribute("data-goto-node").and_then(|s| s.parse::<u32>().ok()) {
                select_node(id, true);
            }
        } else if let Some(node) = dom::closest_with(&ev, "data-node") {
            // A click, not the end of a drag: the innermost node under the pointer.
            if let Some(id) = node.get_attribute("data-node").and_then(|s| s.parse::<u32>().ok()) {
                select_node(id, false);
            }
        }
    });
    listen(&doc, "input", false, |ev| {
        let Some(input) = ev.target().and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok()) else { return };
        if input.id() == "g-search" {
            search(&input.value());
        }
    });
    listen(&doc, "keydown", false, |ev| {
        let ev: web_sys::KeyboardEvent = ev.unchecked_into();
        let target_id =
            ev.target().and_then(|t| t.dyn_into::<web_sys::Element>().ok()).map(|e| e.id()).unwrap_or_default();
        if target_id == "g-search" {
            match ev.key().as_str() {
                "Enter" => jump(!ev.shift_key()),
                "Escape" => {
                    if let Some(w) = by_id("graph-wrap") {
                        let _ = w.focus();
                    }
                }
                _ => return,
            }
            ev.prevent_default();
            return;
        }
        if target_id != "graph-wrap" {
            return;
        }
        match ev.key().as_str() {
            "/" => {
                if let Some(s) = by_id("g-search") {
                    let _ = s.focus();
                }
            }
            "n" => jump(true),
            "N" | "p" => jump(false),
            "j" => step(1),
            "k" => step(-1),
            "+" | "=" => zoom_center(1.25),
            "-" | "_" => zoom_center(0.8),
            "0" => fit(),
            "e" => fold_all(FoldMode::Open),
            "c" => fold_all(FoldMode::Folded),
            "ArrowLeft" => pan(60.0, 0.0),
            "ArrowRight" => pan(-60.0, 0.0),
            "ArrowUp" => pan(0.0, 60.0),
            "ArrowDown" => pan(0.0, -60.0),
            _ => return,
        }
        ev.prevent_default();
    });
}

fn zoom_center(f: f64) {
    if let Some(w) = by_id("graph-wrap") {
        zoom_at(f, w.client_width() as f64 / 2.0, w.client_height() as f64 / 2.0);
    }
}
