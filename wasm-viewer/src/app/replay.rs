//! The Replay tab and the session page: start a replay on one of the host's devices or in this
//! browser, and watch its timings, output regions and verdicts arrive. A host session streams its
//! event log over a WebSocket (history first, then live), so a shared link shows the same thing
//! to everyone; a browser replay produces the same messages locally and feeds the same view. The
//! Timeline tab shows that view's timeline, or this archive's latest replay on the host.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::rc::Rc;

use shared::protocol::{
    CreateSession, DeviceInfo, Event, SessionCreated, SessionInfo, SessionKind, SessionMessage, SessionState,
};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use super::dom::{self, by_id, document, listen, set_html, window};
use super::{api, with_app, Source};
use crate::model::esc;
use crate::plot;
use crate::session::SessionView;

/// Where the replay on screen runs.
#[derive(Clone, Debug, PartialEq)]
enum Runner {
    None,
    Host { id: String, control: Option<String> },
    Browser,
}

struct ReplayState {
    runner: Runner,
    view: SessionView,
    /// Final bytes of every region, for browser replays (plotted in full).
    region_bytes: BTreeMap<u32, Vec<u8>>,
    ws: Option<web_sys::WebSocket>,
    devices: Vec<DeviceInfo>,
    devices_error: Option<String>,
    /// The device to pick in the form once the host's devices are known (a shared session's own).
    preferred_device: Option<String>,
    /// The second side to pick in the form (a shared comparison's own).
    preferred_compare: Option<String>,
    /// Set to stop a browser replay between iterations.
    stop: Rc<Cell<bool>>,
    /// Which archive this state belongs to (a new archive starts afresh).
    archive_key: usize,
    redraw_pending: bool,
    /// The op of a comparison whose parting is shown (the first divergence when none was picked).
    selected_op: Option<u32>,
    /// What the session on screen is: a comparison has no iterations, timings or check of its own.
    kind: SessionKind,
}

impl Default for ReplayState {
    fn default() -> Self {
        ReplayState {
            runner: Runner::None,
            view: SessionView::default(),
            region_bytes: BTreeMap::new(),
            ws: None,
            devices: Vec::new(),
            devices_error: None,
            preferred_device: None,
            preferred_compare: None,
            stop: Rc::new(Cell::new(false)),
            archive_key: 0,
            redraw_pending: false,
            selected_op: None,
            kind: SessionKind::Replay,
        }
    }
}

thread_local! {
    static STATE: RefCell<ReplayState> = RefCell::new(ReplayState::default());
}

fn with_state<R>(f: impl FnOnce(&mut ReplayState) -> R) -> R {
    STATE.with(|s| f(&mut s.borrow_mut()))
}

fn archive_key() -> usize {
    with_app(|app| app.open.as_ref().map(|o| Rc::as_ptr(&o.loaded) as usize).unwrap_or(0))
}

/// Forgets a replay that belongs to another archive.
fn reset_if_other_archive() {
    let key = archive_key();
    with_state(|s| {
        if s.archive_key != key {
            if let Some(ws) = s.ws.take() {
                let _ = ws.close();
            }
            s.stop.set(true);
            *s = ReplayState { devices: std::mem::take(&mut s.devices), archive_key: key, ..ReplayState::default() };
        }
    });
}

pub fn render() {
    reset_if_other_archive();
    let (archive_id, is_local) = with_app(|app| match app.open.as_ref().map(|o| &o.source) {
        Some(Source::Host { info }) => (Some(info.id.clone()), false),
        _ => (None, true),
    });
    let html = format!(
        r#"<div class="replay-view">
  <div class="toolbar">
    <label>device <select id="r-device" aria-label="replay device"></select></label>
    <label id="r-compare-label">compare with <select id="r-compare" aria-label="compare with"></select></label>
    <label id="r-iters-label">iterations <input id="r-iters" type="number" min="1" max="100000" value="10" style="width:80px"></label>
    <label id="r-check-label"><input id="r-check" type="checkbox" checked> check against expected</label>
    <label id="r-determinism-label">replays judged <input id="r-determinism" type="number" min="1" max="16" value="1" style="width:56px" title="whole replays on the device judged together: stretches where they disagree are nondeterministic and judged with their spread"></label>
    <button class="primary" id="r-start" data-replay="start" title="start (Enter)">Start ▶</button>
    <button id="r-cancel" data-replay="cancel" hidden>Stop</button>
    <span class="state" id="r-state"></span>
    <span class="form-note" id="r-form-note" role="note"></span>
    <span class="spacer"></span>
    <button id="r-share" data-replay="share" hidden title="copy the link that shows this session to others">Copy share link</button>
    <input id="r-share-url" class="share-url mono" readonly hidden aria-label="share link">
  </div>
  {}
  <div class="replay-grid">
    <section class="wide" id="r-compare-section" hidden><h4>Comparison, op by op</h4><div id="r-compare-view"></div></section>
    <section><h4>Time per iteration</h4><div id="r-iter-chart" class="chart"></div></section>
    <section><h4>Slowest ops, latest iteration</h4><div id="r-op-chart" class="chart"></div></section>
    <section class="wide"><h4>Timeline of the ops, latest iteration</h4><div id="r-timeline"></div></section>
    <section class="wide"><h4>Check against the expected state</h4><div id="r-check-table"></div></section>
    <section class="wide"><h4>Output regions</h4><div id="r-regions" class="region-cards"></div></section>
    {}
  </div>
</div>"#,
        if is_local {
            r#"<p class="note">This archive was opened locally: it replays in this browser. Upload it to replay it on the host's devices.</p>"#
        } else {
            ""
        },
        if archive_id.is_some() {
            r#"<section class="wide"><h4>Sessions of this archive</h4><div id="r-sessions"><p class="muted">Loading…</p></div></section>"#
        } else {
            ""
        }
    );
    set_html("main-view", &html);
    fill_devices(is_local);
    redraw();
    if let Some(id) = archive_id.clone() {
        wasm_bindgen_futures::spawn_local(super::sessions::load_for_archive(id));
    }
    if archive_id.is_some() && with_state(|s| s.devices.is_empty() && s.devices_error.is_none()) {
        wasm_bindgen_futures::spawn_local(async move {
            let devices = api::get_json::<Vec<DeviceInfo>>("/api/devices").await;
            with_state(|s| match devices {
                Ok(d) => s.devices = d,
                Err(e) => s.devices_error = Some(e),
            });
            fill_devices(false);
        });
    }
}

fn select_value(id: &str) -> Option<String> {
    by_id(id).map(|e| e.unchecked_into::<web_sys::HtmlSelectElement>().value())
}

/// A device's label in the form: a CPU device names the engine it replays with (the host's CPU
/// device runs the jit engine), so that a comparison's two sides are told apart by engine.
fn device_label(d: &DeviceInfo) -> String {
    if d.kind == "cpu" {
        format!("host: {}, jit engine", d.name)
    } else {
        format!("host: {}", d.name)
    }
}

/// The comparison side that a replay on `device` is (the host's `cpu` device is the jit engine),
/// which the form does not offer to compare with itself.
fn own_side(device: &str) -> &str {
    if device == "cpu" {
        "jit"
    } else {
        device
    }
}

fn fill_devices(is_local: bool) {
    let Some(sel) = by_id("r-device") else { return };
    let picked = select_value("r-device").filter(|v| !v.is_empty());
    let html = with_state(|s| {
        let mut h = String::new();
        for d in &s.devices {
            let busy = if d.running + d.queued > 0 {
                format!(" · {} running, {} queued", d.running, d.queued)
            } else {
                String::new()
            };
            let _ = write!(h, r#"<option value="{}">{}{busy}</option>"#, esc(&d.id), esc(&device_label(d)));
        }
        if let Some(e) = &s.devices_error {
            let _ = write!(h, r#"<option disabled>host devices unavailable: {}</option>"#, esc(e));
        }
        if is_local {
            h.push_str(r#"<option disabled>host devices: upload the archive first</option>"#);
        }
        h.push_str(r#"<option value="browser">this browser (wasm interpreter, 1 thread)</option>"#);
        h
    });
    sel.set_inner_html(&html);
    if let Some(cmp) = by_id("r-compare") {
        let picked = select_value("r-compare");
        let options = with_state(|s| {
            let mut h = String::from(r#"<option value="">nothing (replay)</option>"#);
            for engine in ["interp", "jit", "jit-scalar"] {
                let _ = write!(h, r#"<option value="{engine}">host CPU, {engine} engine</option>"#);
            }
            for d in s.devices.iter().filter(|d| d.kind == "cuda") {
                let _ = write!(h, r#"<option value="{}">{}</option>"#, esc(&d.id), esc(&device_label(d)));
            }
            h
        });
        cmp.set_inner_html(&options);
        let cmp_sel = cmp.clone().unchecked_into::<web_sys::HtmlSelectElement>();
        if let Some(c) = with_state(|s| s.preferred_compare.clone()).or(picked) {
            cmp_sel.set_value(&c);
        }
        let _ = cmp.parent_element().map(|l| l.toggle_attribute_with_force("hidden", is_local));
    }
    let sel: web_sys::HtmlSelectElement = sel.unchecked_into();
    if is_local {
        sel.set_value("browser");
    } else if let Some(d) = with_state(|s| s.preferred_device.clone().filter(|d| s.devices.iter().any(|x| &x.id == d)))
    {
        sel.set_value(&d);
    } else if let Some(d) = picked {
        // A refresh of the devices' load keeps what the user picked.
        sel.set_value(&d);
    }
    update_form();
}

/// Fetches the host's devices again (their load changes as sessions start and end) and redraws
/// the form's options with it.
fn refresh_devices() {
    let is_host = with_app(|app| matches!(app.open.as_ref().map(|o| &o.source), Some(Source::Host { .. })));
    if !is_host {
        return;
    }
    wasm_bindgen_futures::spawn_local(async move {
        let devices = api::get_json::<Vec<DeviceInfo>>("/api/devices").await;
        with_state(|s| match devices {
            Ok(d) => {
                s.devices = d;
                s.devices_error = None;
            }
            Err(e) => s.devices_error = Some(e),
        });
        // What the user picks from now on wins over the session's own device.
        with_state(|s| {
            s.preferred_device = None;
            s.preferred_compare = None;
        });
        fill_devices(false);
    });
}

/// Whether the open archive records an expected state for some region (what a check compares).
fn archive_has_expected() -> bool {
    with_app(|app| app.open.as_ref().is_some_and(|o| o.loaded.archive().regions().any(|r| r.expected.is_some())))
}

/// Enables the form's fields that apply to what is picked and disables the others, each with its
/// reason in its tooltip and in the note beside the form; the compare list never offers the
/// device's own side.
fn update_form() {
    let Some(device) = select_value("r-device") else { return };
    let own = own_side(&device).to_string();
    if let Some(cmp) = by_id("r-compare") {
        let cmp_sel = cmp.clone().unchecked_into::<web_sys::HtmlSelectElement>();
        if let Ok(options) = cmp.query_selector_all("option") {
            for i in 0..options.length() {
                let Some(o) = options.item(i).and_then(|n| n.dyn_into::<web_sys::Element>().ok()) else { continue };
                let same = o.get_attribute("value").as_deref() == Some(own.as_str());
                let _ = o.toggle_attribute_with_force("disabled", same);
                if same {
                    let _ = o.set_attribute("title", "the device's own engine: nothing to compare");
                } else {
                    let _ = o.remove_attribute("title");
                }
            }
        }
        if cmp_sel.value() == own {
            cmp_sel.set_value("");
        }
    }
    let in_browser = device == "browser";
    let compare = select_value("r-compare").filter(|c| !c.is_empty() && !in_browser);
    let mut reasons: Vec<&str> = Vec::new();
    let mut set = |label: &str, input: &str, off: Option<&'static str>| {
        if let Some(i) = by_id(input) {
            let _ = i.toggle_attribute_with_force("disabled", off.is_some());
        }
        if let Some(l) = by_id(label) {
            match off {
                Some(why) => {
                    let _ = l.set_attribute("title", why);
                    let _ = l.class_list().add_1("off");
                }
                None => {
                    let _ = l.remove_attribute("title");
                    let _ = l.class_list().remove_1("off");
                }
            }
        }
        if let Some(why) = off.filter(|why| !reasons.contains(why)) {
            reasons.push(why);
        }
    };
    let is_local = with_app(|app| !matches!(app.open.as_ref().map(|o| &o.source), Some(Source::Host { .. })));
    if !is_local {
        set(
            "r-compare-label",
            "r-compare",
            in_browser.then_some("comparisons run on the host: pick a host device to compare with"),
        );
    }
    set("r-iters-label", "r-iters", compare.is_some().then_some("a comparison runs one iteration on each side"));
    let check_off = if !archive_has_expected() {
        Some("this archive records no expected state to check against")
    } else if compare.is_some() {
        Some("a comparison judges its two sides against each other, not against the expected state")
    } else {
        None
    };
    set("r-check-label", "r-check", check_off);
    let determinism_off = if check_off.is_some() {
        check_off
    } else if in_browser {
        Some("the browser replays once: measuring determinism needs a host device")
    } else {
        None
    };
    set("r-determinism-label", "r-determinism", determinism_off);
    if !archive_has_expected() {
        if let Some(c) = by_id("r-check") {
            c.unchecked_into::<web_sys::HtmlInputElement>().set_checked(false);
        }
    }
    let note = reasons.join("; ");
    set_html("r-form-note", &esc(&note));
}

/// Coalesces redraws to one per animation frame: a fast replay sends many events per frame.
fn schedule_redraw() {
    let already = with_state(|s| std::mem::replace(&mut s.redraw_pending, true));
    if already {
        return;
    }
    let cb = Closure::once_into_js(move || {
        with_state(|s| s.redraw_pending = false);
        redraw();
    });
    let _ = window().request_animation_frame(cb.unchecked_ref());
}

fn redraw() {
    if by_id("tl-tab-note").is_some() {
        redraw_timeline_tab();
        return;
    }
    if by_id("r-state").is_none() {
        return;
    }
    let (runner, state_html, iter_chart, op_chart, check_html, regions_html, running, compare_html) = with_state(|s| {
        let v = &s.view;
        // Kept region contents can be fetched once a host session has finished.
        let download = match &s.runner {
            Runner::Host { id, .. } if !id.is_empty() && v.state == Some(SessionState::Finished) => Some(id.clone()),
            _ => None,
        };
        // A session whose archive was deleted still shows its comparison, from its log.
        let compare_html = v.compare.as_ref().map(|c| {
            with_app(|app| {
                let archive = app.open.as_ref().map(|o| o.loaded.archive());
                super::compare_view::html(c, archive, s.selected_op, download.as_deref())
            })
        });
        let state = v.state.map(|x| x.name()).unwrap_or(if s.runner == Runner::None { "" } else { "starting" });
        let mut st = format!(r#"<span class="badge st-{state}" id="r-state-name">{state}</span>"#);
        if let Some(p) = v.queue_position {
            let _ = write!(st, " queue position {p}");
        }
        if !v.device.is_empty() {
            let _ = write!(st, " on <b>{}</b>", esc(&v.device));
        }
        let is_compare = s.kind == SessionKind::Compare || v.compare.is_some();
        if v.iterations_planned > 0 && !is_compare {
            let done = v.iteration_ms.iter().filter(|x| x.is_finite()).count();
            let _ = write!(st, r#" · <span id="r-progress">{done}/{}</span> iterations"#, v.iterations_planned);
        }
        if let Some(t) = v.total_ms {
            let _ = write!(st, " · total {}", plot::duration(t));
        }
        if let Some(e) = &v.error {
            let _ = write!(st, r#" <span class="error-inline" id="r-error">{}</span>"#, esc(e));
        }
        if v.gap {
            st.push_str(r#" <span class="warn">(some messages were missed)</span>"#);
        }
        let iter_chart = if v.iteration_ms.is_empty() {
            r#"<p class="muted">No iterations yet.</p>"#.to_string()
        } else {
            let stats = format!(
                r#"<div class="stats mono" id="r-iter-stats">{}</div>"#,
                esc(&plot::iterations_summary(&v.iteration_ms))
            );
            format!("{}{stats}", plot::iterations_svg(&v.iteration_ms, 520, 160))
        };
        let slow = v.slowest_ops(12);
        let op_chart = if slow.is_empty() {
            r#"<p class="muted">No op timings yet.</p>"#.to_string()
        } else {
            let bars: Vec<(String, f64)> = slow
                .iter()
                .map(|t| (format!("{} {}", t.op, t.name.clone().unwrap_or_else(|| t.kind.clone())), t.time_ms))
                .collect();
            plot::bars_svg(&bars, 520, "ms")
        };
        let check_html = match &v.check {
            None if v.state == Some(SessionState::Finished) => r#"<p class="muted">Not checked.</p>"#.to_string(),
            None => r#"<p class="muted">The verdict comes when the replay finishes.</p>"#.to_string(),
            Some(c) => crate::check_view::check_html(c),
        };
        let mut regions_html = String::new();
        for r in &v.regions {
            let verdict = match v.verdict(r.region) {
                Some(true) => r#"<span class="badge pass">pass</span>"#,
                Some(false) => r#"<span class="badge fail">fail</span>"#,
                None => "",
            };
            let plot_html = match s.region_bytes.get(&r.region) {
                Some(bytes) => with_app(|app| {
                    app.open
                        .as_ref()
                        .map(|o| {
                            let rv = o.loaded.archive().region(r.region);
                            super::views::data_chart(bytes, &rv, "final", false)
                        })
                        .unwrap_or_default()
                }),
                // A host session sends a downsampled preview: the same line or heatmap.
                None => match &r.preview {
                    Some(p) => super::views::preview_plot(&format!("hm-out-{}", r.region), p, &r.name),
                    None => histogram_svg(&r.histogram, r.min, r.max),
                },
            };
            let first: Vec<String> = r.first.iter().map(|x| x.map(plot::num).unwrap_or_else(|| "NaN".into())).collect();
            let link = download.as_ref().map_or(String::new(), |id| {
                format!(
                    r#" <a class="npy" download href="{}">.npy</a>"#,
                    esc(&api::url(&format!("/api/sessions/{id}/regions/{}", r.region)))
                )
            });
            // A region whose every element is one value is a fill or a constant, and says so.
            let constant = match (r.min, r.max) {
                (Some(lo), Some(hi)) if lo == hi && !s.region_bytes.contains_key(&r.region) => {
                    crate::model::constant_note(lo, &r.dtype, r.count)
                        .map(|n| format!(r#"<div class="stats fill-note">{}</div>"#, esc(&n)))
                        .unwrap_or_default()
                }
                _ => String::new(),
            };
            let _ = write!(
                regions_html,
                r#"<div class="region-card" data-out-region="{}"><h5><span class="mono">{}</span> {verdict} <span class="muted">{} {}{} elements</span>{link}</h5>{plot_html}<div class="stats mono">elements: min {} · max {} · mean {}{}</div>{constant}<div class="stats mono first">[{}{}]</div></div>"#,
                r.region,
                esc(&r.name),
                esc(&r.dtype),
                if r.shape.len() > 1 { format!("{:?} · ", r.shape) } else { String::new() },
                r.count,
                r.min.map(plot::num).unwrap_or("–".into()),
                r.max.map(plot::num).unwrap_or("–".into()),
                r.mean.map(plot::num).unwrap_or("–".into()),
                if r.nan_count + r.inf_count > 0 {
                    format!(" · {} NaN, {} inf", r.nan_count, r.inf_count)
                } else {
                    String::new()
                },
                first.join(", "),
                if (r.first.len() as u64) < r.count { ", …" } else { "" }
            );
        }
        if regions_html.is_empty() {
            regions_html = r#"<p class="muted">Final region contents arrive when the replay finishes.</p>"#.to_string();
        }
        let running = matches!(v.state, Some(SessionState::Queued) | Some(SessionState::Running))
            || (s.runner != Runner::None && v.state.is_none());
        (s.runner.clone(), st, iter_chart, op_chart, check_html, regions_html, running, compare_html)
    });
    if let Some(section) = by_id("r-compare-section") {
        section.set_hidden(compare_html.is_none());
    }
    // A comparison runs one iteration on each side and judges them against each other: it has no
    // time per iteration, op timings, check or output regions of its own, so those panels go
    // rather than wait for what never comes.
    let is_compare = with_state(|s| s.kind == SessionKind::Compare || s.view.compare.is_some());
    for panel in ["r-iter-chart", "r-op-chart", "r-timeline", "r-check-table", "r-regions"] {
        if let Some(section) = by_id(panel).and_then(|p| p.parent_element()) {
            let _ = section.toggle_attribute_with_force("hidden", is_compare);
        }
    }
    if let Some(h) = &compare_html {
        set_html("r-compare-view", h);
    }
    set_html("r-state", &state_html);
    set_html("r-iter-chart", &iter_chart);
    set_html("r-op-chart", &op_chart);
    set_html("r-check-table", &check_html);
    set_html("r-regions", &regions_html);
    if by_id("r-timeline").is_some() {
        let timings = with_state(|s| s.view.op_timings.clone());
        super::timeline_view::show(&timings, super::graph_view::top_level_edges());
    }
    super::views::draw_pending_heatmaps();
    if let Some(b) = by_id("r-start") {
        let _ = b.toggle_attribute_with_force("disabled", running);
    }
    if let Some(b) = by_id("r-cancel") {
        let can_cancel = running && matches!(&runner, Runner::Browser | Runner::Host { control: Some(_), .. });
        b.set_hidden(!can_cancel);
    }
    let share = match &runner {
        Runner::Host { id, .. } => Some(share_url(id)),
        _ => None,
    };
    if let (Some(b), Some(u)) = (by_id("r-share"), by_id("r-share-url")) {
        b.set_hidden(share.is_none());
        u.set_hidden(share.is_none());
        if let Some(link) = &share {
            let input: web_sys::HtmlInputElement = u.unchecked_into();
            input.set_value(link);
            input.set_size(link.len().min(70) as u32);
        }
    }
    if let Some(root) = by_id("r-state") {
        let _ = root.set_attribute("data-state", with_state(|s| s.view.state.map(|x| x.name()).unwrap_or("")));
    }
}

fn histogram_svg(bins: &[u64], min: Option<f64>, max: Option<f64>) -> String {
    if bins.is_empty() {
        return r#"<p class="muted">no finite values</p>"#.to_string();
    }
    let (w, h) = (360.0, 70.0);
    let top = bins.iter().copied().max().unwrap_or(1).max(1) as f64;
    let bw = w / bins.len() as f64;
    let mut s = format!(
        r#"<svg class="plot hist" viewBox="0 0 {w} {}" width="{w}" height="{}" role="img"><title>histogram of final values</title>"#,
        h + 14.0,
        h + 14.0
    );
    for (i, &b) in bins.iter().enumerate() {
        let bh = b as f64 / top * h;
        let _ = write!(
            s,
            r#"<rect class="bar" x="{:.1}" y="{:.1}" width="{:.1}" height="{bh:.1}"/>"#,
            i as f64 * bw + 0.5,
            h - bh,
            (bw - 1.0).max(0.5)
        );
    }
    let _ = write!(
        s,
        r#"<text class="axis" x="0" y="{}">{}</text><text class="axis" x="{w}" y="{}" text-anchor="end">{}</text></svg>"#,
        h + 12.0,
        min.map(plot::num).unwrap_or_default(),
        h + 12.0,
        max.map(plot::num).unwrap_or_default()
    );
    s
}

pub fn share_url(id: &str) -> String {
    let origin = window().location().origin().unwrap_or_default();
    format!("{origin}{}", api::url(&format!("/sessions/{id}")))
}

fn ws_url(id: &str) -> String {
    let loc = window().location();
    let proto = if loc.protocol().unwrap_or_default() == "https:" { "wss" } else { "ws" };
    format!("{proto}://{}{}", loc.host().unwrap_or_default(), api::url(&format!("/api/sessions/{id}/ws")))
}

/// Watches host session `id`: its log so far, then live events, until it ends.
pub fn attach(id: String, control: Option<String>, kind: SessionKind) {
    reset_if_other_archive();
    with_state(|s| {
        if let Some(ws) = s.ws.take() {
            let _ = ws.close();
        }
        s.kind = kind;
        s.runner = Runner::Host { id: id.clone(), control };
        s.view = SessionView::default();
        super::timeline_view::reset();
        s.region_bytes.clear();
        s.selected_op = None;
    });
    let ws = match web_sys::WebSocket::new(&ws_url(&id)) {
        Ok(ws) => ws,
        Err(e) => {
            with_state(|s| s.view.error = Some(format!("cannot open the session's live stream: {e:?}")));
            redraw();
            return;
        }
    };
    let on_msg = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |ev: web_sys::MessageEvent| {
        let Some(text) = ev.data().as_string() else { return };
        match serde_json::from_str::<Event>(&text) {
            Ok(e) => {
                let ended_now = with_state(|s| {
                    let was = s.view.state.is_some_and(|st| st.is_terminal());
                    s.view.apply(&e);
                    !was && s.view.state.is_some_and(|st| st.is_terminal())
                });
                // The devices' load the form shows changed as this session ended. The host may
                // send the end before it lets go of the device, so ask again a moment later.
                if ended_now {
                    refresh_devices();
                    for delay_ms in [500, 2000] {
                        let again = Closure::once_into_js(refresh_devices);
                        let _ = web_sys::window()
                            .expect("a window")
                            .set_timeout_with_callback_and_timeout_and_arguments_0(again.unchecked_ref(), delay_ms);
                    }
                }
            }
            // Replies addressed to this viewer alone (a refused cancel) carry no seq.
            Err(_) => {
                let msg = serde_json::from_str::<shared::protocol::Reply>(&text)
                    .map(|shared::protocol::Reply::Error { message, .. }| message)
                    .unwrap_or_else(|e| format!("unreadable message from the host: {e}"));
                dom::log(&msg);
                super::set_status(&msg);
            }
        }
        schedule_redraw();
    });
    ws.set_onmessage(Some(on_msg.as_ref().unchecked_ref()));
    on_msg.forget();
    let on_close = Closure::<dyn FnMut(web_sys::CloseEvent)>::new(move |ev: web_sys::CloseEvent| {
        with_state(|s| {
            let ended = s.view.state.is_some_and(|st| st.is_terminal());
            if !ended && ev.code() != 1000 {
                s.view.error = Some(format!(
                    "the live stream closed (code {}){}",
                    ev.code(),
                    if ev.reason().is_empty() { String::new() } else { format!(": {}", ev.reason()) }
                ));
            }
        });
        schedule_redraw();
        // The stream closes once the host is done with the session: its device is free by now,
        // even where the end's message came before the host let go of it.
        refresh_devices();
        // The archive's own list of sessions now holds this one as it ended.
        let archive = with_app(|app| match app.open.as_ref().map(|o| &o.source) {
            Some(Source::Host { info }) => Some(info.id.clone()),
            _ => None,
        });
        if let (Some(archive), true) = (archive, by_id("r-sessions").is_some()) {
            wasm_bindgen_futures::spawn_local(super::sessions::load_for_archive(archive));
        }
    });
    ws.set_onclose(Some(on_close.as_ref().unchecked_ref()));
    on_close.forget();
    with_state(|s| s.ws = Some(ws));
    schedule_redraw();
}

async fn start_host(
    archive: String,
    device: String,
    iterations: u32,
    check: bool,
    determinism: Option<u32>,
    compare_with: Option<String>,
) {
    let kind = if compare_with.is_some() { SessionKind::Compare } else { SessionKind::Replay };
    // A comparison runs one iteration on each side and judges them against each other.
    let (iterations, check) = if compare_with.is_some() { (1, false) } else { (iterations, check) };
    let req = CreateSession {
        archive,
        device,
        iterations,
        check,
        bindings: Default::default(),
        budget: None,
        time_limit_s: None,
        kind,
        compare_with,
        compare_all: false,
        compare_against: None,
        cuda_mode: None,
        determinism,
    };
    match api::post_json::<SessionCreated>("/api/sessions", &req).await {
        Ok(created) => {
            let path = api::url(&format!("/sessions/{}", created.id));
            let _ = window()
                .history()
                .and_then(|h| h.push_state_with_url(&JsValue::NULL, "", Some(&format!("{path}{}", tab_hash()))));
            attach(created.id, Some(created.control), kind);
        }
        Err(e) => {
            with_state(|s| {
                s.runner = Runner::None;
                s.view = SessionView { error: Some(format!("the host refused the replay: {e}")), ..Default::default() };
            });
            redraw();
        }
    }
}

/// Loads session `id` from the host: its archive, then its live view.
pub async fn open_session(id: String, generation: u64) {
    let info = match api::get_json::<SessionInfo>(&format!("/api/sessions/{id}")).await {
        Ok(i) => i,
        Err(e) => {
            super::show_page_error(&format!("Cannot open session <code>{}</code>: {}", esc(&id), esc(&e)));
            return;
        }
    };
    // A session outlives its archive: without it, the page shows what the session's log holds.
    let archive_gone = matches!(
        api::get_json::<shared::protocol::ArchiveInfo>(&format!("/api/archives/{}", info.archive)).await,
        Err(e) if e.contains("(404")
    );
    if archive_gone {
        if super::current_generation() == generation {
            render_without_archive(&info);
        }
        return;
    }
    if !super::ensure_host_archive(&info.archive, generation).await {
        return;
    }
    let control = web_sys::UrlSearchParams::new_with_str(&window().location().search().unwrap_or_default())
        .ok()
        .and_then(|p| p.get("control"));
    with_app(|app| app.open.as_mut().map(|o| o.tab = super::Tab::Replay));
    reset_if_other_archive();
    with_state(|s| {
        // A comparison's first side may be a CPU engine; the form offers the CPU for it.
        let device = if info.device.starts_with("cuda") { info.device.clone() } else { "cpu".to_string() };
        s.preferred_device = Some(if info.kind == SessionKind::Compare { device } else { info.device.clone() });
        s.preferred_compare = info.compare_with.clone();
    });
    super::render_archive();
    // The form shows what this session ran, so "Start" repeats it.
    if let Some(i) = by_id("r-iters") {
        i.unchecked_into::<web_sys::HtmlInputElement>().set_value(&info.iterations.to_string());
    }
    fill_devices(false);
    attach(id, control, info.kind);
    redraw();
}

/// The page of a session whose archive was deleted: its state, timings, verdicts and kept regions,
/// all from its log (the regions still download); no form, as there is nothing left to replay.
fn render_without_archive(info: &SessionInfo) {
    with_app(|app| app.open = None);
    reset_if_other_archive();
    let name = info.archive_name.as_deref().unwrap_or(&info.archive);
    set_html(
        "crumb",
        &format!(
            r#"<a href="/" data-link class="up">archives</a><span class="sep">/</span><span class="name">session {}</span><span class="tag">{}</span>"#,
            esc(&info.id[..info.id.len().min(12)]),
            esc(info.kind.name())
        ),
    );
    super::set_status("");
    set_html(
        "main",
        &format!(
            r#"<div class="archive"><div class="view" id="main-view"><div class="replay-view">
  <div class="toolbar"><span class="state" id="r-state"></span><span class="spacer"></span>
    <button id="r-share" data-replay="share" hidden title="copy the link that shows this session to others">Copy share link</button>
    <input id="r-share-url" class="share-url mono" readonly hidden aria-label="share link"></div>
  <p class="note" id="r-archive-gone">The archive of this session, <b class="mono">{}</b> (<span class="mono">{}</span>), was deleted from the host. The session keeps its results: what it reported and the regions it kept.</p>
  <div class="replay-grid">
    <section class="wide" id="r-compare-section" hidden><h4>Comparison, op by op</h4><div id="r-compare-view"></div></section>
    <section><h4>Time per iteration</h4><div id="r-iter-chart" class="chart"></div></section>
    <section><h4>Slowest ops, latest iteration</h4><div id="r-op-chart" class="chart"></div></section>
    <section class="wide"><h4>Timeline of the ops, latest iteration</h4><div id="r-timeline"></div></section>
    <section class="wide"><h4>Check against the expected state</h4><div id="r-check-table"></div></section>
    <section class="wide"><h4>Output regions</h4><div id="r-regions" class="region-cards"></div></section>
  </div>
</div></div></div>"#,
            esc(name),
            esc(&info.archive[..info.archive.len().min(12)])
        ),
    );
    attach(info.id.clone(), None, info.kind);
    redraw();
}

fn start_clicked() {
    let device =
        by_id("r-device").map(|e| e.unchecked_into::<web_sys::HtmlSelectElement>().value()).unwrap_or_default();
    let iterations = by_id("r-iters")
        .map(|e| e.unchecked_into::<web_sys::HtmlInputElement>().value())
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(1)
        .clamp(1, 100_000);
    // A disabled field does not apply (the form says why): it asks for nothing.
    let check = by_id("r-check")
        .map(|e| e.unchecked_into::<web_sys::HtmlInputElement>())
        .is_some_and(|c| c.checked() && !c.disabled());
    // One replay is the plain check; more measure the device's own spread (host sessions only).
    let determinism = by_id("r-determinism")
        .map(|e| e.unchecked_into::<web_sys::HtmlInputElement>())
        .filter(|e| !e.disabled())
        .and_then(|e| e.value().trim().parse::<u32>().ok())
        .filter(|&n| n > 1 && check)
        .map(|n| n.min(shared::protocol::MAX_DETERMINISM));
    let compare_with = by_id("r-compare")
        .map(|e| e.unchecked_into::<web_sys::HtmlSelectElement>())
        .filter(|c| !c.disabled())
        .map(|c| c.value())
        .filter(|v| !v.is_empty());
    if device.is_empty() {
        return;
    }
    if compare_with.as_deref() == Some(own_side(&device)) {
        with_state(|s| {
            s.view = SessionView {
                error: Some(format!(
                    "{device} replays with the same engine as {}: nothing to compare",
                    own_side(&device)
                )),
                ..Default::default()
            }
        });
        redraw();
        return;
    }
    if device == "browser" {
        start_browser(iterations, check);
        return;
    }
    let archive = with_app(|app| match app.open.as_ref().map(|o| &o.source) {
        Some(Source::Host { info }) => Some(info.id.clone()),
        _ => None,
    });
    let Some(archive) = archive else { return };
    begin_host(archive, device, iterations, check, determinism, compare_with);
}

/// Leaves the replay on screen for a new host session, then asks the host for it.
fn begin_host(
    archive: String,
    device: String,
    iterations: u32,
    check: bool,
    determinism: Option<u32>,
    compare_with: Option<String>,
) {
    with_state(|s| {
        if let Some(ws) = s.ws.take() {
            let _ = ws.close();
        }
        s.runner = Runner::Host { id: String::new(), control: None };
        s.view = SessionView::default();
        s.region_bytes.clear();
        s.selected_op = None;
    });
    redraw();
    wasm_bindgen_futures::spawn_local(start_host(archive, device, iterations, check, determinism, compare_with));
}

/// The address's fragment for the tab on screen, so a replay started from a tab stays on it.
fn tab_hash() -> String {
    window().location().hash().ok().filter(|h| h.len() > 1).unwrap_or_else(|| "#replay".to_string())
}

fn cancel_clicked() {
    let runner = with_state(|s| s.runner.clone());
    match runner {
        Runner::Browser => with_state(|s| s.stop.set(true)),
        Runner::Host { id, control: Some(control) } => {
            wasm_bindgen_futures::spawn_local(async move {
                let r = api::post_json::<SessionInfo>(
                    &format!("/api/sessions/{id}/cancel?control={control}"),
                    &serde_json::json!({}),
                )
                .await;
                if let Err(e) = r {
                    super::set_status(&e);
                }
            });
        }
        _ => {}
    }
}

fn share_clicked() {
    let link = with_state(|s| match &s.runner {
        Runner::Host { id, .. } if !id.is_empty() => Some(share_url(id)),
        _ => None,
    });
    let Some(link) = link else { return };
    let clip = window().navigator().clipboard();
    let promise = clip.write_text(&link);
    wasm_bindgen_futures::spawn_local(async move {
        let msg = match wasm_bindgen_futures::JsFuture::from(promise).await {
            Ok(_) => "share link copied to the clipboard".to_string(),
            Err(_) => "the browser refused the clipboard: copy the link from the box".to_string(),
        };
        super::set_status(&msg);
        if let Some(u) = by_id("r-share-url") {
            let input: web_sys::HtmlInputElement = u.unchecked_into();
            input.select();
        }
    });
}

// ---- replay in this browser ----

fn start_browser(iterations: u32, check: bool) {
    let Some(loaded) = with_app(|app| app.open.as_ref().map(|o| o.loaded.clone())) else { return };
    let stop = Rc::new(Cell::new(false));
    with_state(|s| {
        if let Some(ws) = s.ws.take() {
            let _ = ws.close();
        }
        s.stop.set(true);
        s.stop = stop.clone();
        s.runner = Runner::Browser;
        s.kind = SessionKind::Replay;
        s.view = SessionView::default();
        super::timeline_view::reset();
        s.region_bytes.clear();
    });
    // A replay here is not the host session that may be on screen: the address goes back to the
    // archive's own page (a local archive has none and stays where it is).
    let path = with_app(|app| match app.open.as_ref().map(|o| &o.source) {
        Some(Source::Host { info }) => format!("{}{}", api::url(&format!("/archives/{}", info.id)), tab_hash()),
        _ => tab_hash(),
    });
    let _ = window().history().and_then(|h| h.replace_state_with_url(&JsValue::NULL, "", Some(&path)));
    redraw();
    wasm_bindgen_futures::spawn_local(async move {
        let mut seq = 0u64;
        let mut emit = |m: SessionMessage| {
            let e = Event { seq, time_us: (js_sys::Date::now() * 1000.0) as u64, message: m };
            seq += 1;
            with_state(|s| s.view.apply(&e));
            schedule_redraw();
        };
        let result = super::browser_replay::run(&loaded, iterations, check, &stop, &mut emit).await;
        match result {
            Ok(bytes) => with_state(|s| s.region_bytes = bytes),
            Err(e) if stop.get() => {
                let _ = e;
                emit(SessionMessage::state(SessionState::Cancelled));
                emit(SessionMessage::Cancelled);
            }
            Err(e) => {
                emit(SessionMessage::state(SessionState::Failed));
                emit(SessionMessage::Failed { error: e });
            }
        }
        schedule_redraw();
    });
}

/// Shows the parting of `op` and scrolls its row and the plots into view.
fn show_divergence(op: Option<u32>) {
    let Some(op) = op else { return };
    with_state(|s| s.selected_op = Some(op));
    redraw();
    if let Some(row) = by_id(&format!("cmp-op-{op}")) {
        row.scroll_into_view_with_bool(false);
    }
    if let Some(detail) = by_id("cmp-parting") {
        detail.scroll_into_view_with_bool(true);
    }
}

pub fn wire() {
    let doc: web_sys::EventTarget = document().into();
    listen(&doc, "click", false, |ev| {
        if let Some(el) = dom::closest_with(&ev, "data-replay") {
            match el.get_attribute("data-replay").as_deref() {
                Some("start") => start_clicked(),
                Some("cancel") => cancel_clicked(),
                Some("share") => share_clicked(),
                Some("timeline-start") => timeline_start_clicked(),
                Some("first-divergence") => {
                    show_divergence(with_state(|s| s.view.compare.as_ref().and_then(|c| c.first_divergence())))
                }
                _ => {}
            }
        }
        if let Some(row) = dom::closest_with(&ev, "data-cmp-op") {
            show_divergence(row.get_attribute("data-cmp-op").and_then(|v| v.parse().ok()));
        }
    });
    for event in ["input", "change"] {
        listen(&doc, event, false, |ev| {
            let id =
                ev.target().and_then(|t| t.dyn_into::<web_sys::Element>().ok()).map(|e| e.id()).unwrap_or_default();
            if id == "r-device" || id == "r-compare" {
                update_form();
            }
        });
    }
    listen(&doc, "keydown", false, |ev| {
        let ev: web_sys::KeyboardEvent = ev.unchecked_into();
        let id = ev.target().and_then(|t| t.dyn_into::<web_sys::Element>().ok()).map(|e| e.id()).unwrap_or_default();
        if ev.key() == "Enter" && (id == "r-iters" || id == "r-device") {
            ev.prevent_default();
            start_clicked();
        }
    });
}

/// The Timeline tab: the timeline of the replay on screen, else of this archive's latest replay on
/// the host (its log is streamed like a shared link's), else a plain note that no replay has run,
/// with a button that starts one.
pub fn render_timeline_tab() {
    reset_if_other_archive();
    set_html(
        "main-view",
        r#"<div class="timeline-tab"><div class="toolbar"><span class="state" id="tl-tab-note" role="status"></span></div><section class="wide"><h4>Timeline of the ops, latest iteration</h4><div id="r-timeline"></div></section></div>"#,
    );
    let host_archive = with_app(|app| match app.open.as_ref().map(|o| &o.source) {
        Some(Source::Host { info }) => Some(info.id.clone()),
        _ => None,
    });
    let idle = with_state(|s| s.runner == Runner::None);
    match host_archive {
        Some(archive) if idle => {
            set_html("tl-tab-note", r#"<span class="muted">Looking for this archive's latest replay…</span>"#);
            wasm_bindgen_futures::spawn_local(attach_latest_replay(archive));
        }
        _ => redraw_timeline_tab(),
    }
}

/// Streams the newest replay session of `archive` the host knows (comparisons have no timeline),
/// or says that there is none.
async fn attach_latest_replay(archive: String) {
    let found = api::get_json::<Vec<SessionInfo>>(&format!("/api/sessions?archive={archive}")).await;
    // The tab may have been left, or a replay started, while the host answered.
    if by_id("tl-tab-note").is_none() || with_state(|s| s.runner != Runner::None) {
        return;
    }
    match found {
        Ok(list) => match list.into_iter().find(|s| s.kind == SessionKind::Replay) {
            Some(latest) => attach(latest.id, None, SessionKind::Replay),
            None => redraw_timeline_tab(),
        },
        Err(e) => set_html("tl-tab-note", &format!("cannot list this archive's sessions: {}", esc(&e))),
    }
}

fn redraw_timeline_tab() {
    let (runner, state, error, timings) =
        with_state(|s| (s.runner.clone(), s.view.state, s.view.error.clone(), s.view.op_timings.clone()));
    let state_name = |st: Option<SessionState>| {
        st.and_then(|st| serde_json::to_value(st).ok()).and_then(|v| v.as_str().map(str::to_string))
    };
    let note = match (&runner, &error) {
        (_, Some(e)) => format!(r#"<span class="error">{}</span>"#, esc(e)),
        (Runner::None, None) => {
            let local = with_app(|app| !matches!(app.open.as_ref().map(|o| &o.source), Some(Source::Host { .. })));
            format!(
                r#"No replay has run on this archive yet. <button class="primary" data-replay="timeline-start">Replay 10 iterations {} ▶</button>"#,
                if local { "in this browser" } else { "on the host's CPU" }
            )
        }
        (Runner::Browser, None) => {
            let st = state_name(state).unwrap_or_else(|| "starting".into());
            format!(r#"Replay in this browser: <span data-state="{st}">{st}</span>"#)
        }
        (Runner::Host { id, .. }, None) if id.is_empty() => "Asking the host for a replay…".to_string(),
        (Runner::Host { id, .. }, None) => {
            let st = state_name(state).unwrap_or_else(|| "connecting".into());
            format!(r#"Session <a href="{}">{}</a>: <span data-state="{st}">{st}</span>"#, esc(&share_url(id)), esc(id))
        }
    };
    set_html("tl-tab-note", &note);
    if runner != Runner::None {
        super::timeline_view::show(&timings, super::graph_view::top_level_edges());
    }
}

/// Starts a replay from the Timeline tab: 10 iterations, checked where the archive holds an
/// expected state, on the host's CPU (or in this browser for an archive opened locally).
fn timeline_start_clicked() {
    let check = archive_has_expected();
    let archive = with_app(|app| match app.open.as_ref().map(|o| &o.source) {
        Some(Source::Host { info }) => Some(info.id.clone()),
        _ => None,
    });
    match archive {
        Some(archive) => begin_host(archive, "cpu".to_string(), 10, check, None, None),
        None => start_browser(10, check),
    }
}
