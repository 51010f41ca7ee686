//! The timeline of the Replay and Timeline tabs: the latest iteration's op timings as spans on a time axis
//! ([`crate::timeline`]), zoomed with the wheel around the cursor, panned by dragging, fitted with
//! the button or `0`; the critical path through the plan's DAG outlined; a click on a span says
//! what it is.

use std::cell::RefCell;
use std::fmt::Write as _;

use shared::protocol::OpTiming;
use wasm_bindgen::JsCast;

use super::dom::{self, by_id, document, listen, set_html};
use crate::model::{count, esc};
use crate::plot::duration;
use crate::timeline::{self, Arrangement, Timeline};

struct State {
    timings: Vec<OpTiming>,
    /// The plan's top-level edges (`None`: no archive open, so no DAG).
    edges: Option<Vec<(u32, u32)>>,
    arrangement: Arrangement,
    built: Timeline,
    /// The visible window in ms; `None` fits the whole iteration.
    view: Option<(f64, f64)>,
    selected: Option<u32>,
    /// A drag in progress: where it started (client x) and the window then.
    drag: Option<(f64, (f64, f64))>,
    /// Whether the last mouse press moved (a pan, not a click).
    dragged: bool,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State {
        timings: Vec::new(),
        edges: None,
        arrangement: Arrangement::AsRun,
        built: Timeline::default(),
        view: None,
        selected: None,
        drag: None,
        dragged: false,
    });
}

/// Forgets the zoom and the selection (a new replay begins).
pub fn reset() {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        s.view = None;
        s.selected = None;
    });
}

/// Shows `timings` in `#r-timeline` (the section is rebuilt only when they changed).
pub fn show(timings: &[OpTiming], edges: Option<Vec<(u32, u32)>>) {
    let Some(root) = by_id("r-timeline") else { return };
    let fresh = root.query_selector("#tl-wrap").ok().flatten().is_none();
    let changed = STATE.with(|s| {
        let mut s = s.borrow_mut();
        let changed = s.timings != timings || s.edges != edges;
        if changed {
            s.timings = timings.to_vec();
            s.edges = edges;
            s.built = timeline::build(&s.timings, s.edges.as_deref(), s.arrangement);
        }
        changed
    });
    if !changed && !fresh {
        return;
    }
    if timings.is_empty() {
        root.set_inner_html(r#"<p class="muted">No op timings yet.</p>"#);
        return;
    }
    let (has_dag, arrangement) = STATE.with(|s| (s.borrow().edges.is_some(), s.borrow().arrangement));
    let on = |a: Arrangement| {
        if a == arrangement {
            r#" class="on" aria-pressed="true""#
        } else {
            r#" aria-pressed="false""#
        }
    };
    let dep_button = if has_dag {
        format!(
            r#"<button data-tl="dep"{} title="each op at the earliest time the ops it depends on allow">by dependency</button>"#,
            on(Arrangement::ByDependency)
        )
    } else {
        String::new()
    };
    root.set_inner_html(&format!(
        r#"<div class="tl-bar"><span class="seg"><button data-tl="run"{}>as run</button>{dep_button}</span><button data-tl="fit" title="fit (0)">Fit</button><span class="mono" id="tl-stats"></span><span class="hint">wheel to zoom · drag to pan · click a span</span></div>
<div class="tl-wrap" id="tl-wrap" tabindex="0" aria-label="op timeline"></div>
<div class="tl-detail mono" id="tl-detail"></div>"#,
        on(Arrangement::AsRun)
    ));
    draw();
}

fn window_of(s: &State) -> (f64, f64) {
    s.view.unwrap_or((0.0, s.built.end_ms.max(1e-9)))
}

/// Redraws the SVG, the stats and the detail line for the current window.
fn draw() {
    let Some(wrap) = by_id("tl-wrap") else { return };
    let w = (wrap.client_width() as f64).max(320.0);
    let (svg, stats, detail) = STATE.with(|s| {
        let s = s.borrow();
        let t = &s.built;
        let svg = timeline::to_svg(t, window_of(&s), w, s.selected);
        let mut stats = format!("{} · serial {}", count(t.spans.len() as u64, "op", "ops"), duration(t.serial_ms));
        if let Some((path, ms)) = &t.critical {
            let pct = if t.serial_ms > 0.0 { ms / t.serial_ms * 100.0 } else { 100.0 };
            let _ = write!(
                stats,
                r#" · <span class="crit-key">critical path</span> <span id="tl-critical" data-ms="{ms}" data-ops="{}">{} over {} ({pct:.0}% of serial)</span>"#,
                path.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
                duration(*ms),
                count(path.len() as u64, "op", "ops")
            );
        }
        let detail = s.selected.and_then(|op| t.spans.iter().find(|sp| sp.op == op)).map(|sp| {
            format!(
                r#"op {} · {} <b>{}</b> · {} · from {} to {}{}"#,
                sp.op,
                esc(&sp.kind),
                esc(&sp.label),
                duration(sp.time_ms),
                duration(sp.start_ms),
                duration(sp.start_ms + sp.time_ms),
                if sp.critical { r#" · <span class="crit-key">on the critical path</span>"# } else { "" }
            )
        });
        (svg, stats, detail)
    });
    wrap.set_inner_html(&svg);
    set_html("tl-stats", &stats);
    set_html(
        "tl-detail",
        &detail.unwrap_or_else(|| r#"<span class="muted">Click a span for its op.</span>"#.to_string()),
    );
}

fn set_view(v: Option<(f64, f64)>) {
    STATE.with(|s| s.borrow_mut().view = v);
    draw();
}

/// Zooms by `factor` (>1 zooms in) keeping the time under `fx` (0..1 across the view) in place.
fn zoom(factor: f64, fx: f64) {
    let v = STATE.with(|s| {
        let s = s.borrow();
        let end = s.built.end_ms.max(1e-9);
        let (t0, t1) = window_of(&s);
        let at = t0 + fx * (t1 - t0);
        let span = ((t1 - t0) / factor).clamp(end * 1e-6, end * 1.05);
        let t0 = (at - fx * span).clamp(-end * 0.05, end * 1.05 - span);
        (t0, t0 + span)
    });
    set_view(Some(v));
}

fn in_timeline(ev: &web_sys::Event) -> Option<web_sys::Element> {
    ev.target().and_then(|t| t.dyn_into::<web_sys::Element>().ok()).and_then(|e| e.closest("#tl-wrap").ok().flatten())
}

pub fn wire() {
    let doc: web_sys::EventTarget = document().into();
    let opts = web_sys::AddEventListenerOptions::new();
    opts.set_passive(false);
    let cb = wasm_bindgen::closure::Closure::<dyn FnMut(web_sys::WheelEvent)>::new(|ev: web_sys::WheelEvent| {
        let Some(wrap) = in_timeline(&ev) else { return };
        ev.prevent_default();
        let r = wrap.get_bounding_client_rect();
        let fx = ((ev.client_x() as f64 - r.left()) / r.width().max(1.0)).clamp(0.0, 1.0);
        zoom((-ev.delta_y() * 0.002).exp(), fx);
    });
    let _ = doc.add_event_listener_with_callback_and_add_event_listener_options(
        "wheel",
        cb.as_ref().unchecked_ref(),
        &opts,
    );
    cb.forget();
    listen(&doc, "mousedown", false, |ev| {
        if in_timeline(&ev).is_none() {
            return;
        }
        let ev: web_sys::MouseEvent = ev.unchecked_into();
        STATE.with(|s| {
            let mut s = s.borrow_mut();
            let v = window_of(&s);
            s.drag = Some((ev.client_x() as f64, v));
            s.dragged = false;
        });
    });
    listen(&doc, "mousemove", false, |ev| {
        let Some((x0, (t0, t1))) = STATE.with(|s| s.borrow().drag) else { return };
        let ev: web_sys::MouseEvent = ev.unchecked_into();
        let Some(wrap) = by_id("tl-wrap") else { return };
        let dx = ev.client_x() as f64 - x0;
        if dx.abs() < 3.0 && !STATE.with(|s| s.borrow().dragged) {
            return;
        }
        let w = (wrap.client_width() as f64).max(1.0);
        let shift = -dx / w * (t1 - t0);
        STATE.with(|s| s.borrow_mut().dragged = true);
        let _ = wrap.class_list().add_1("panning");
        set_view(Some((t0 + shift, t1 + shift)));
    });
    listen(&doc, "mouseup", false, |_| {
        STATE.with(|s| s.borrow_mut().drag = None);
        if let Some(w) = by_id("tl-wrap") {
            let _ = w.class_list().remove_1("panning");
        }
    });
    listen(&doc, "click", false, |ev| {
        if let Some(b) = dom::closest_with(&ev, "data-tl") {
            match b.get_attribute("data-tl").as_deref() {
                Some("fit") => set_view(None),
                Some(which @ ("run" | "dep")) => {
                    let a = if which == "dep" { Arrangement::ByDependency } else { Arrangement::AsRun };
                    STATE.with(|s| {
                        let mut s = s.borrow_mut();
                        s.arrangement = a;
                        s.view = None;
                        s.built = timeline::build(&s.timings, s.edges.as_deref(), a);
                    });
                    // Rebuild the bar so the pressed button follows.
                    let (timings, edges) = STATE.with(|s| {
                        let mut s = s.borrow_mut();
                        (std::mem::take(&mut s.timings), s.edges.clone())
                    });
                    show(&timings, edges);
                }
                _ => {}
            }
            return;
        }
        if in_timeline(&ev).is_none() || STATE.with(|s| s.borrow().dragged) {
            return;
        }
        let op =
            dom::closest_with(&ev, "data-op").and_then(|e| e.get_attribute("data-op")).and_then(|v| v.parse().ok());
        STATE.with(|s| s.borrow_mut().selected = op);
        draw();
    });
    listen(&doc, "keydown", false, |ev| {
        let on = ev.target().and_then(|t| t.dyn_into::<web_sys::Element>().ok()).is_some_and(|e| e.id() == "tl-wrap");
        if !on {
            return;
        }
        let ev: web_sys::KeyboardEvent = ev.unchecked_into();
        match ev.key().as_str() {
            "+" | "=" => zoom(1.5, 0.5),
            "-" | "_" => zoom(1.0 / 1.5, 0.5),
            "0" => set_view(None),
            "ArrowLeft" | "ArrowRight" => {
                let (t0, t1) = STATE.with(|s| window_of(&s.borrow()));
                let d = (t1 - t0) * 0.2 * if ev.key() == "ArrowLeft" { -1.0 } else { 1.0 };
                set_view(Some((t0 + d, t1 + d)));
            }
            _ => return,
        }
        ev.prevent_default();
    });
}
