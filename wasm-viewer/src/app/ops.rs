//! The op table: virtualised (only the rows in view exist in the DOM, so a million ops scroll
//! like ten), filterable by kind and kernel, keyboard-driven, with a detail pane for the selection.

use std::fmt::Write as _;

use wasm_bindgen::JsCast;

use super::dom::{self, by_id, document, listen, set_html};
use super::with_app;
use crate::model::{self, esc, OP_KINDS};

pub const ROW_H: f64 = 20.0;
/// Rows drawn beyond each edge of the viewport, so that a scroll of fewer rows than this needs
/// no DOM work at all.
const OVERSCAN: usize = 24;

thread_local! {
    /// The op-list positions whose rows are in the DOM now (`first..last`).
    static DRAWN: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((0, 0)) };
}

pub fn render() {
    let html = with_app(|app| {
        let open = app.open.as_ref()?;
        let a = open.loaded.archive();
        let mut kinds = String::from(r#"<option value="">all kinds</option>"#);
        for k in OP_KINDS {
            let sel = if open.filter.kind == k { " selected" } else { "" };
            let _ = write!(kinds, r#"<option value="{k}"{sel}>{k}</option>"#);
        }
        let mut kernels = String::new();
        for k in a.kernels() {
            let _ = write!(kernels, r#"<option value="{}">"#, esc(k.name));
        }
        Some(format!(
            r#"<div class="ops-view">
  <div class="toolbar">
    <label>kind <select id="f-kind" aria-label="filter by op kind">{kinds}</select></label>
    <label>kernel <input id="f-kernel" list="kernel-names" placeholder="filter by kernel  ( / )" value="{}" aria-label="filter by kernel name" autocomplete="off"></label>
    <datalist id="kernel-names">{kernels}</datalist>
    <span class="count" id="ops-count"></span>
    <span class="hint">↑↓ PgUp PgDn Home End to move, / to filter</span>
  </div>
  <div class="split">
    <div class="table ops">
      <div class="row head"><span>#</span><span>kind</span><span>kernel</span><span>grid × block</span><span>shared</span><span title="regions (↔ read or written) · detail">regions (↔ read or written) · detail</span></div>
      <div class="tbody" id="ops-scroll" tabindex="0" role="grid" aria-label="ops">
        <div id="ops-spacer"><div id="ops-rows"></div></div>
      </div>
    </div>
    <aside class="detail" id="op-detail" aria-live="polite"></aside>
  </div>
</div>"#,
            esc(&open.filter.kernel)
        ))
    });
    let Some(html) = html else { return };
    set_html("main-view", &html);
    refresh_rows();
    render_detail();
}

/// Resizes the spacer to the filtered row count and draws the rows in view.
pub fn refresh_rows() {
    let n = with_app(|app| app.open.as_ref().map(|o| (o.visible.len(), o.loaded.archive().op_count())));
    let Some((n, total)) = n else { return };
    if let Some(sp) = by_id("ops-spacer") {
        let _ = sp.style().set_property("height", &format!("{}px", n as f64 * ROW_H));
    }
    let count = if n == total { model::count(total as u64, "op", "ops") } else { format!("{n} of {total} ops") };
    set_html("ops-count", &count);
    draw_rows();
}

/// On scroll: redraws only when the viewport reaches past the rows already drawn.
fn scrolled() {
    let Some(scroll) = by_id("ops-scroll") else { return };
    let top = scroll.scroll_top() as f64;
    let height = scroll.client_height() as f64;
    let n = with_app(|app| app.open.as_ref().map(|o| o.visible.len())).unwrap_or(0);
    let (view_first, view_last) = ((top / ROW_H) as usize, (((top + height) / ROW_H).ceil() as usize).min(n));
    let (first, last) = DRAWN.with(|d| d.get());
    if first <= view_first && view_last <= last {
        return;
    }
    draw_rows();
}

/// Draws the rows that intersect the scroll viewport, plus a margin.
pub fn draw_rows() {
    let Some(scroll) = by_id("ops-scroll") else { return };
    let top = scroll.scroll_top() as f64;
    let height = scroll.client_height().max(400) as f64;
    let html = with_app(|app| {
        let open = app.open.as_ref()?;
        let a = open.loaded.archive();
        let n = open.visible.len();
        let first = ((top / ROW_H) as usize).saturating_sub(OVERSCAN).min(n);
        let last = (((top + height) / ROW_H) as usize + OVERSCAN).min(n);
        DRAWN.with(|d| d.set((first, last)));
        let mut html = String::with_capacity((last - first) * 160);
        for &id in &open.visible[first..last] {
            let r = model::op_row(a, id);
            let depth = open.depths.get(id as usize).copied().unwrap_or(0);
            let sel = if open.selected == Some(id) { " sel" } else { "" };
            let _ = write!(
                html,
                r#"<div class="row k-{kind}{sel}" data-op="{id}" role="row"><span>{id}</span><span style="padding-left:{pad}px">{kind}</span><span title="{kernel}">{kernel}</span><span>{}</span><span>{}</span><span title="{detail}">{detail}</span></div>"#,
                esc(&r.dims),
                esc(&r.shared),
                kernel = esc(&r.kernel),
                detail = esc(&r.detail),
                kind = r.kind,
                pad = depth as u32 * 12,
            );
        }
        Some((first, html))
    });
    let Some((first, html)) = html else { return };
    if let Some(rows) = by_id("ops-rows") {
        let _ = rows.style().set_property("transform", &format!("translateY({}px)", first as f64 * ROW_H));
        rows.set_inner_html(&html);
    }
}

fn render_detail() {
    let html = with_app(|app| {
        let open = app.open.as_ref()?;
        let a = open.loaded.archive();
        let Some(id) = open.selected else {
            return Some(String::from(r#"<p class="muted">Select an op to see its parameters.</p>"#));
        };
        Some(detail_html(a, id))
    });
    if let Some(h) = html {
        set_html("op-detail", &h);
    }
}

/// An op's details: its kind, and for a launch its kernel, shape and decoded parameters.
pub fn detail_html(a: &shared::archive::Archive, id: u32) -> String {
    let r = model::op_row(a, id);
    let mut h = format!(r#"<h3><span class="kind k-{}">{}</span> op {id}</h3>"#, r.kind, r.kind);
    if let shared::archive::Op::Launch(l) = a.op(id) {
        let k = a.kernel(l.kernel);
        let module = a.module(k.module).name;
        let _ = write!(
            h,
            r#"<dl class="kv"><dt>kernel</dt><dd class="mono">{}</dd><dt>module</dt><dd>{}</dd><dt>grid</dt><dd>{:?}</dd><dt>block</dt><dd>{:?}</dd><dt>dynamic shared</dt><dd>{} bytes</dd><dt>param bytes</dt><dd>{}</dd></dl>"#,
            esc(k.name),
            esc(module),
            l.grid,
            l.block,
            l.shared_bytes,
            l.params.len()
        );
        h.push_str(r#"<table class="params"><thead><tr><th>param</th><th>type</th><th>offset</th><th>size</th><th>value</th></tr></thead><tbody>"#);
        for p in model::launch_params(a, id) {
            let mut ptrs = String::new();
            if p.kind == shared::archive::ParamKind::Value {
                for (off, t) in &p.pointers {
                    let _ = write!(ptrs, r#"<div class="ptr">+{off}: &amp;{}</div>"#, esc(t));
                }
            }
            let _ = write!(
                h,
                r#"<tr><td class="mono">{}</td><td class="mono ty">{}</td><td>{}</td><td>{}</td><td class="mono val">{}{ptrs}</td></tr>"#,
                esc(&p.name),
                if p.ty.is_empty() { String::new() } else { format!(".{}", esc(&p.ty)) },
                p.offset,
                p.size,
                esc(&p.value)
            );
        }
        h.push_str("</tbody></table>");
    } else {
        let _ = write!(h, r#"<p class="mono">{}</p>"#, esc(&r.detail));
    }
    h
}

pub fn select(id: u32, scroll_into_view: bool) {
    let pos = with_app(|app| {
        let open = app.open.as_mut()?;
        open.selected = Some(id);
        open.visible.binary_search(&id).ok()
    });
    if let (Some(pos), true, Some(scroll)) = (pos, scroll_into_view, by_id("ops-scroll")) {
        let y = pos as f64 * ROW_H;
        let top = scroll.scroll_top() as f64;
        let h = scroll.client_height() as f64;
        if y < top {
            scroll.set_scroll_top(y as i32);
        } else if y + ROW_H > top + h {
            scroll.set_scroll_top((y + ROW_H - h) as i32);
        }
    }
    draw_rows();
    render_detail();
}

fn move_selection(delta: i64) {
    let page = by_id("ops-scroll").map(|s| (s.client_height() as f64 / ROW_H) as i64).unwrap_or(20);
    let target = with_app(|app| {
        let open = app.open.as_ref()?;
        let n = open.visible.len() as i64;
        if n == 0 {
            return None;
        }
        let cur = open.selected.and_then(|s| open.visible.binary_search(&s).ok()).map(|p| p as i64).unwrap_or(-1);
        let d = match delta {
            i64::MIN => -n,
            i64::MAX => n,
            1000 => page,
            -1000 => -page,
            d => d,
        };
        Some(open.visible[(cur + d).clamp(0, n - 1) as usize])
    });
    if let Some(t) = target {
        select(t, true);
    }
}

fn apply_filter() {
    let kind = by_id("f-kind").map(|e| e.unchecked_into::<web_sys::HtmlSelectElement>().value()).unwrap_or_default();
    let kernel = by_id("f-kernel").map(|e| e.unchecked_into::<web_sys::HtmlInputElement>().value()).unwrap_or_default();
    with_app(|app| {
        if let Some(open) = app.open.as_mut() {
            open.filter.kind = kind;
            open.filter.kernel = kernel.trim().to_string();
            open.visible = if open.filter.is_empty() {
                (0..open.loaded.archive().op_count() as u32).collect()
            } else {
                open.filter.apply(open.loaded.archive())
            };
        }
    });
    if let Some(s) = by_id("ops-scroll") {
        s.set_scroll_top(0);
    }
    refresh_rows();
}

/// Long-lived listeners for the op table (delegated: the table is re-rendered freely).
pub fn wire() {
    let doc: web_sys::EventTarget = document().into();
    // Scroll does not bubble; listening in the capture phase sees it anyway.
    listen(&doc, "scroll", true, |ev| {
        let is_ops =
            ev.target().and_then(|t| t.dyn_into::<web_sys::Element>().ok()).is_some_and(|e| e.id() == "ops-scroll");
        if is_ops {
            scrolled();
        }
    });
    listen(&doc, "click", false, |ev| {
        if let Some(row) = dom::closest_with(&ev, "data-op") {
            if let Some(id) = row.get_attribute("data-op").and_then(|s| s.parse().ok()) {
                select(id, false);
                if let Some(s) = by_id("ops-scroll") {
                    let _ = s.focus();
                }
            }
        }
    });
    listen(&doc, "input", false, |ev| {
        let id = ev.target().and_then(|t| t.dyn_into::<web_sys::Element>().ok()).map(|e| e.id()).unwrap_or_default();
        if id == "f-kernel" || id == "f-kind" {
            apply_filter();
        }
    });
    listen(&doc, "keydown", false, |ev| {
        let ev: web_sys::KeyboardEvent = ev.unchecked_into();
        let target_id =
            ev.target().and_then(|t| t.dyn_into::<web_sys::Element>().ok()).map(|e| e.id()).unwrap_or_default();
        let typing = ev
            .target()
            .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
            .is_some_and(|e| matches!(e.tag_name().as_str(), "INPUT" | "SELECT" | "TEXTAREA"));
        if ev.key() == "/" && !typing && by_id("f-kernel").is_some() {
            ev.prevent_default();
            if let Some(f) = by_id("f-kernel") {
                let _ = f.focus();
            }
            return;
        }
        if ev.key() == "Escape" && target_id == "f-kernel" {
            if let Some(s) = by_id("ops-scroll") {
                let _ = s.focus();
            }
            return;
        }
        if target_id != "ops-scroll" {
            return;
        }
        let delta = match ev.key().as_str() {
            "ArrowDown" | "j" => 1,
            "ArrowUp" | "k" => -1,
            "PageDown" => 1000,
            "PageUp" => -1000,
            "Home" => i64::MIN,
            "End" => i64::MAX,
            _ => return,
        };
        ev.prevent_default();
        move_selection(delta);
    });
}
