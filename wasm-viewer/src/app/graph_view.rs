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
    <span class="hint">drag to pan · wheel to zoom · click an op to select it · laid out in {ms:.0} ms</span></div>
  <div class="graph-wrap" id="graph-wrap" tabindex="0" aria-label="op dependency graph">
    <svg id="graph-svg" class="graph" width="100%" height="100%">
      <defs><marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0L8,4L0,8z" class="arrowhead"/></marker></defs>
      <g id="graph-root">{body}</g>
    </svg>
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
        } else if let Some(node) = dom::closest_with(&ev, "data-node") {
            if let Some(id) = node.get_attribute("data-node").and_then(|s| s.parse::<u32>().ok()) {
                with_app(|app| app.open.as_mut().map(|o| o.selected = Some(id)));
                if let Ok(list) = document().query_selector_all("#graph-root .node.sel") {
                    for i in 0..list.length() {
                        if let Some(e) = list.item(i).and_then(|n| n.dyn_into::<web_sys::Element>().ok()) {
                            let _ = e.class_list().remove_1("sel");
                        }
                    }
                }
                let _ = node.class_list().add_1("sel");
                super::set_status(&format!("op {id} selected (press 1 to see it in the op list)"));
            }
        }
    });
    listen(&doc, "keydown", false, |ev| {
        let ev: web_sys::KeyboardEvent = ev.unchecked_into();
        let on_graph =
            ev.target().and_then(|t| t.dyn_into::<web_sys::Element>().ok()).is_some_and(|e| e.id() == "graph-wrap");
        if !on_graph {
            return;
        }
        match ev.key().as_str() {
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
