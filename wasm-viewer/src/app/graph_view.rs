//! The Graph tab: the op DAG from `shared::plan`, laid out in Rust ([`crate::graph`]), drawn as
//! SVG, with pan (drag, arrow keys) and zoom (wheel around the cursor, + and -, 0 to fit).

use std::cell::{Cell, RefCell};

use shared::archive::Op;
use wasm_bindgen::JsCast;

use super::dom::{self, by_id, document, listen, set_html};
use super::with_app;
use crate::graph::{self, DagInput, NodeLabel};
use crate::model::esc;

thread_local! {
    /// Pan and zoom: `(tx, ty, scale)`.
    static VIEW: Cell<(f64, f64, f64)> = const { Cell::new((0.0, 0.0, 1.0)) };
    static SIZE: Cell<(f64, f64)> = const { Cell::new((0.0, 0.0)) };
    static DRAG: Cell<Option<(f64, f64)>> = const { Cell::new(None) };
    /// The plan's DAGs for the open archive, computed once per archive.
    static DAGS: RefCell<Option<(usize, Vec<DagInput>, usize)>> = const { RefCell::new(None) };
}

fn dags_for(open: &super::Open) -> (Vec<DagInput>, usize) {
    let key = std::rc::Rc::as_ptr(&open.loaded) as usize;
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
    DAGS.with(|c| *c.borrow_mut() = Some((key, dags.clone(), edges)));
    (dags, edges)
}

/// The top-level DAG's edges of the open archive (what the timeline's critical path follows).
pub fn top_level_edges() -> Option<Vec<(u32, u32)>> {
    with_app(|app| {
        let open = app.open.as_ref()?;
        let (dags, _) = dags_for(open);
        dags.into_iter().find(|d| d.owner.is_none()).map(|d| d.edges)
    })
}

pub fn render() {
    let html = with_app(|app| {
        let open = app.open.as_ref()?;
        let a = open.loaded.archive();
        let t0 = dom::now_ms();
        let (dags, edge_count) = dags_for(open);
        let layout = graph::layout(&dags, None);
        let label = |op: u32| -> NodeLabel {
            let row = crate::model::op_row(a, op);
            match a.op(op) {
                Op::Launch(_) => NodeLabel { kind: row.kind, title: format!("{op} {}", row.kernel), sub: row.dims },
                Op::While { .. } | Op::If { .. } => {
                    NodeLabel { kind: row.kind, title: format!("{op} {}", row.kind), sub: row.detail }
                }
                _ => NodeLabel { kind: row.kind, title: format!("{op} {}", row.kind), sub: row.detail },
            }
        };
        let body = graph::to_svg(&layout, &label, open.selected);
        let ms = dom::now_ms() - t0;
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
        Some(format!(
            r#"<div class="graph-view">
  <div class="toolbar"><span class="count">{} ops · {} dependency edges · {} layers at top level</span>{omitted}
    <button data-graph="fit" title="fit (0)">Fit</button><button data-graph="in" title="zoom in (+)">+</button><button data-graph="out" title="zoom out (−)">−</button>
    <input id="g-search" type="search" placeholder="find a kernel (/)" aria-label="find ops by kernel name" style="width:180px"><span class="count" id="g-matches"></span>
    <span class="hint">drag to pan · wheel to zoom · click an op for its details · n/N next/previous match · j/k next/previous op · laid out in {ms:.0} ms</span></div>
  <div class="graph-main">
  <div class="graph-wrap" id="graph-wrap" tabindex="0" aria-label="op dependency graph">
    <svg id="graph-svg" class="graph" width="100%" height="100%">
      <defs><marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0L8,4L0,8z" class="arrowhead"/></marker></defs>
      <g id="graph-root">{body}</g>
    </svg>
  </div>
  <aside class="detail graph-pane" id="graph-pane" aria-label="op details"><p class="muted">Click an op for its details.</p></aside>
  </div>
  <div class="graph-legend">{}</div>
</div>"#,
            a.op_count(),
            edge_count,
            layout.layers,
            legend()
        ))
    });
    if let Some(h) = html {
        set_html("main-view", &h);
        fit();
        if let Some(op) = with_app(|app| app.open.as_ref().and_then(|o| o.selected)) {
            select_node(op, false);
        }
    }
}

thread_local! {
    /// The ops whose kernel matches the search, in op order, and the one last jumped to.
    static MATCHES: RefCell<(Vec<u32>, Option<usize>)> = const { RefCell::new((Vec::new(), None)) };
}

/// Selects `op`: outlined in the graph, its details (and the ops it waits for and that wait for it)
/// in the side pane; `center` brings it to the middle of the view.
pub fn select_node(op: u32, center: bool) {
    let pane = with_app(|app| {
        let open = app.open.as_mut()?;
        open.selected = Some(op);
        let a = open.loaded.archive();
        let (dags, _) = dags_for(open);
        let (mut before, mut after) = (Vec::new(), Vec::new());
        for d in &dags {
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
    let mut drawn = 0;
    for op in &found {
        if let Ok(Some(e)) = document().query_selector(&format!("#graph-root [data-node='{op}']")) {
            let _ = e.class_list().add_1("match");
            drawn += 1;
        }
    }
    let text = match (q.is_empty(), found.len()) {
        (true, _) => String::new(),
        (false, 0) => "no match".to_string(),
        (false, n) if drawn < n => format!("{n} matches, {drawn} drawn"),
        (false, 1) => "1 match".to_string(),
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
}

pub fn fit() {
    let Some(wrap) = by_id("graph-wrap") else { return };
    let (w, h) = SIZE.with(|s| s.get());
    let (vw, vh) = (wrap.client_width() as f64, wrap.client_height() as f64);
    if w <= 0.0 || vw <= 0.0 {
        return;
    }
    let s = ((vw - 40.0) / w).min((vh - 40.0) / h).clamp(0.02, 1.5);
    VIEW.with(|v| v.set(((vw - w * s) / 2.0, 20.0, s)));
    apply();
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
        let ev: web_sys::MouseEvent = ev.unchecked_into();
        DRAG.with(|d| d.set(Some((ev.client_x() as f64, ev.client_y() as f64))));
    });
    listen(&doc, "mousemove", false, |ev| {
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
                _ => {}
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
