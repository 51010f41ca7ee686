//! The archive's other views: kernels with their PTX, regions with plots of their data, bindings.

use std::fmt::Write as _;

use shared::archive::{Archive, Op, RegionView};
use wasm_bindgen::{Clamped, JsCast};

use super::dom::{self, by_id, document, listen, set_html};
use super::with_app;
use crate::model::{bytes_human, esc, grid_shape};
use crate::plot;

/// How many launches of each kernel the archive's ops make, by kernel id.
pub(crate) fn launches_per_kernel(a: &Archive) -> Vec<usize> {
    let mut n = vec![0usize; a.kernel_count()];
    for op in a.ops() {
        if let Op::Launch(l) = op {
            if let Some(c) = n.get_mut(l.kernel as usize) {
                *c += 1;
            }
        }
    }
    n
}

pub fn render_kernels() {
    let html = with_app(|app| {
        let open = app.open.as_mut()?;
        let a = open.loaded.archive();
        if a.kernel_count() == 0 {
            return Some(
                r#"<div class="pane"><p class="muted">This archive launches no kernels.</p></div>"#.to_string(),
            );
        }
        let sel = open.selected_kernel.min(a.kernel_count() as u32 - 1);
        let counts = launches_per_kernel(a);
        let mut list = String::new();
        for k in a.kernels() {
            let _ = write!(
                list,
                r#"<div class="row{}" data-kernel="{}" tabindex="-1"><span>{}</span><span class="mono" title="{name}">{name}</span><span>{}</span><span>{}</span></div>"#,
                if k.id == sel { " sel" } else { "" },
                k.id,
                k.id,
                k.params.len(),
                counts[k.id as usize],
                name = esc(k.name),
            );
        }
        let k = a.kernel(sel);
        let module = a.module(k.module);
        let mut params = String::new();
        for p in &k.params {
            let _ = write!(
                params,
                r#"<tr><td class="mono">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
                esc(&p.name),
                p.offset,
                p.size,
                p.align,
                if p.kind == shared::archive::ParamKind::Pointer { "pointer" } else { "value" }
            );
        }
        let ptx = match module.ptx_text() {
            Ok(t) => highlight_entry(&t, k.name),
            Err(e) => format!(r#"<div class="error">{}</div>"#, esc(&e.to_string())),
        };
        let cubins: Vec<String> =
            module.cubins.iter().map(|(sm, b)| format!("sm_{sm} ({})", bytes_human(b.len()))).collect();
        Some(format!(
            r#"<div class="split">
  <div class="table kernels" style="flex:0 0 460px">
    <div class="row head"><span>#</span><span>entry</span><span>params</span><span>launches</span></div>
    <div class="tbody" id="kernel-list" tabindex="0" aria-label="kernels">{list}</div>
  </div>
  <div class="pane" id="kernel-detail">
    <h3 class="mono">{}</h3>
    <dl class="kv"><dt>module</dt><dd>{}</dd><dt>param bytes</dt><dd>{}</dd><dt>cubins</dt><dd>{}</dd></dl>
    <table class="params"><thead><tr><th>param</th><th>offset</th><th>size</th><th>align</th><th>kind</th></tr></thead><tbody>{params}</tbody></table>
    <h4>PTX</h4>
    <pre class="ptx" id="ptx-src">{ptx}</pre>
  </div>
</div>"#,
            esc(k.name),
            esc(module.name),
            k.params_size(),
            if cubins.is_empty() { "none (JIT from PTX)".to_string() } else { cubins.join(", ") }
        ))
    });
    if let Some(h) = html {
        set_html("main-view", &h);
        if let Some(e) = document().query_selector("#ptx-src .entry").ok().flatten() {
            e.scroll_into_view();
        }
        if let Some(m) = by_id("main-view") {
            m.set_scroll_top(0);
        }
    }
}

/// Escapes PTX and marks the `.entry` line of `name` so the view can scroll to it.
fn highlight_entry(ptx: &str, name: &str) -> String {
    let mut out = String::with_capacity(ptx.len() + 64);
    for line in ptx.lines() {
        let is_entry = line.contains(".entry") && line.contains(name);
        let t = line.trim_start();
        let class = if is_entry {
            Some("entry")
        } else if t.starts_with("//") {
            Some("c")
        } else if t.starts_with('$') || t.ends_with(':') && !t.contains(' ') {
            Some("l")
        } else {
            None
        };
        match class {
            Some(c) => {
                let _ = writeln!(out, r#"<span class="{c}">{}</span>"#, esc(line));
            }
            None => {
                out.push_str(&esc(line));
                out.push('\n');
            }
        }
    }
    out
}

fn tolerance_text(r: &RegionView) -> String {
    match r.tolerance {
        None => "none (no expected state)".into(),
        Some(shared::archive::Tolerance::Exact) => "exact".into(),
        Some(shared::archive::Tolerance::Close { rtol, atol }) => format!("rtol {rtol:e}, atol {atol:e}"),
        Some(shared::archive::Tolerance::MismatchFraction { max_fraction }) => format!("≤ {max_fraction} mismatched"),
    }
}

/// The region's typed layout and the spread its capture recorded, as `<dt>/<dd>` pairs (nothing
/// where the archive has neither).
fn types_text(a: &shared::archive::Archive<'_>, region: shared::archive::RegionId) -> String {
    let mut out = String::new();
    if let Some(layout) = a.typed_layout(region) {
        let _ = write!(out, "<dt>types</dt><dd class=\"mono\">{}</dd>", esc(&shared::archive::layout_line(&layout)));
    }
    for s in a.recorded_spread(region) {
        let _ = write!(
            out,
            "<dt>spread at capture</dt><dd>bytes {}..{}: repeated runs disagree on {} elements by up to {} ulps</dd>",
            s.offset,
            s.offset + s.len,
            s.elements,
            s.ulps
        );
    }
    out
}

pub fn shape_text(r: &RegionView) -> String {
    if r.shape.is_empty() {
        format!("[{}]", r.size / r.dtype.size() as u64)
    } else {
        format!("{:?}", r.shape)
    }
}

pub fn render_regions() {
    let html = with_app(|app| {
        let open = app.open.as_mut()?;
        let a = open.loaded.archive();
        if a.region_count() == 0 {
            return Some(r#"<div class="pane"><p class="muted">This archive has no regions.</p></div>"#.to_string());
        }
        let sel = open.selected_region.min(a.region_count() as u32 - 1);
        let host_id = match &open.source {
            super::Source::Host { info } => Some(info.id.clone()),
            _ => None,
        };
        let mut rows = String::new();
        for r in a.regions() {
            let _ = write!(
                rows,
                r#"<div class="row{}" data-region="{}"><span>{}</span><span class="mono" title="{name}">{name}</span><span>{}</span><span>{}</span><span title="{shape}">{shape}</span><span>{}</span><span>{}</span></div>"#,
                if r.id == sel { " sel" } else { "" },
                r.id,
                r.id,
                bytes_human(r.size),
                r.dtype.name(),
                match (&r.initial, r.scratch) {
                    (_, true) => "scratch",
                    (Some(_), _) => "initial",
                    (None, _) => "zero",
                },
                if r.expected.is_some() { "✓" } else { "" },
                name = esc(r.name),
                shape = shape_text(&r),
            );
        }
        let r = a.region(sel);
        Some(format!(
            r#"<div class="split">
  <div class="table regions" style="flex:0 0 620px">
    <div class="row head"><span>#</span><span>name</span><span>size</span><span>dtype</span><span>shape</span><span>data</span><span>expected</span></div>
    <div class="tbody" id="region-list" tabindex="0" aria-label="regions">{rows}</div>
  </div>
  <div class="pane" id="region-detail">
    <h3 class="mono">{}</h3>
    <dl class="kv"><dt>size</dt><dd>{} bytes ({})</dd><dt>element</dt><dd>{} × {}</dd><dt>align</dt><dd>{}</dd><dt>tolerance</dt><dd>{}</dd>{}</dl>
    {}
  </div>
</div>"#,
            esc(r.name),
            r.size,
            bytes_human(r.size),
            r.dtype.name(),
            shape_text(&r),
            r.align,
            esc(&tolerance_text(&r)),
            types_text(a, r.id),
            region_plots(&r, host_id.as_deref())
        ))
    });
    if let Some(h) = html {
        set_html("main-view", &h);
        draw_pending_heatmaps();
    }
}

/// Plots for a region's initial and expected data (a canvas placeholder for heatmaps, filled
/// after the HTML is in the DOM), with `.npy` downloads when the archive is on the host
/// (`archive` is its id).
fn region_plots(r: &RegionView, archive: Option<&str>) -> String {
    let mut out = String::new();
    for (label, contents, blob) in
        [("initial", "initial", &r.initial), ("expected after replay", "expected", &r.expected)]
    {
        let link = archive.map_or(String::new(), |id| {
            format!(
                r#" <a class="npy" data-npy="{contents}" download href="{}">.npy</a>"#,
                esc(&super::api::url(&format!("/api/archives/{id}/regions/{}?contents={contents}", r.id)))
            )
        });
        let Some(blob) = blob else {
            if label == "initial" {
                let _ = write!(out, r#"<h4>initial{link}</h4><p class="muted">no initial data (zero-filled)</p>"#);
            }
            continue;
        };
        let _ = write!(out, "<h4>{label}{link}</h4>");
        // Previews decode at most 64 MiB; larger regions are summarised from their head.
        let limit = 64 << 20;
        let bytes =
            if blob.len() <= limit {
                blob.decode()
            } else {
                let mut v = vec![0u8; limit as usize];
                std::io::Read::read_exact(&mut blob.reader(), &mut v)
                    .map(|_| v)
                    .map_err(|e| shared::archive::FormatError { section: "blobs", offset: 0, reason: e.to_string() })
            };
        match bytes {
            Ok(bytes) => out.push_str(&data_plot(&bytes, r, label)),
            Err(e) => {
                let _ = write!(out, r#"<div class="error">{}</div>"#, esc(&e.to_string()));
            }
        }
    }
    out
}

/// A heatmap waiting for its canvas: the canvas id, width, height and RGBA pixels.
type Pixels = (String, u32, u32, Vec<u8>);

thread_local! {
    static PENDING: std::cell::RefCell<Vec<Pixels>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A plot of region bytes: a heatmap when the shape is 2-D or more, else a min/max line.
pub fn data_plot(bytes: &[u8], r: &RegionView, label: &str) -> String {
    data_chart(bytes, r, label, true)
}

/// A line plot (1-D) or heatmap (2-D) of a region's bytes, with or without its min/max line.
pub fn data_chart(bytes: &[u8], r: &RegionView, label: &str, with_stats: bool) -> String {
    let s = crate::model::series(bytes, r.dtype, 600);
    // A fill (every word the same) is said as what it is: its min and max read as numbers would
    // pass for computed values.
    let fill = crate::model::fill_note(bytes)
        .map(|n| format!(r#"<div class="stats fill-note">{}</div>"#, esc(&n)))
        .unwrap_or_default();
    let stats = if !with_stats {
        fill
    } else {
        format!(
            r#"<div class="stats mono">elements: min {} · max {} · {} elements{}</div>{fill}"#,
            plot::num(s.min),
            plot::num(s.max),
            s.elements,
            if s.non_finite > 0 { format!(" · {} non-finite", s.non_finite) } else { String::new() }
        )
    };
    if let Some((rows, cols)) = grid_shape(r) {
        let (w, h, mean) = plot::heatmap_cells(bytes, r.dtype, rows, cols, 512);
        let id = format!("hm-{}-{}", r.id, label.len());
        let cells = HeatCells { w, h, rows: rows as u64, cols: cols as u64, mean, range: None };
        format!("{}{stats}", heatmap_canvas(id, cells, label))
    } else {
        format!("{}{stats}", plot::series_svg(&s, 560, 140, "region"))
    }
}

/// A host's downsampled preview of a region: a heatmap for 2-D, else a min/max line.
pub fn preview_plot(id: &str, p: &shared::protocol::RegionPreview, label: &str) -> String {
    if p.rows > 1 {
        let cells = HeatCells {
            w: p.cols as usize,
            h: p.rows as usize,
            rows: p.source_shape[0],
            cols: p.source_shape[1],
            mean: p.mean.clone(),
            range: Some((p.min.clone(), p.max.clone())),
        };
        heatmap_canvas(id.to_string(), cells, label)
    } else {
        plot::series_svg(&plot::preview_series(p), 560, 140, "region")
    }
}

/// One value per heatmap cell, `None` where it covers no finite element.
pub type Cells = Vec<Option<f64>>;

/// A heatmap's cells as drawn: `w`×`h` cells over a `rows`×`cols` source, each the mean of what it
/// covers, with the min and max of each where known (a host's preview).
pub struct HeatCells {
    pub w: usize,
    pub h: usize,
    pub rows: u64,
    pub cols: u64,
    pub mean: Vec<Option<f64>>,
    pub range: Option<(Cells, Cells)>,
}

thread_local! {
    /// The cells behind every heatmap on the page, by canvas id, for the values under the pointer.
    static HEAT: std::cell::RefCell<std::collections::HashMap<String, HeatCells>> = std::cell::RefCell::new(Default::default());
}

/// A canvas for a heatmap of `cells`, at most 360 px on its longer side in the source's
/// proportions, with its colour scale under it; painted by [`draw_pending_heatmaps`] once
/// inserted. The pointer over it tells the value of the cell beneath.
pub fn heatmap_canvas(id: String, cells: HeatCells, label: &str) -> String {
    let (rows, cols) = (cells.rows, cells.cols);
    let (w, h, px, lo, hi) = plot::grid_rgba(&cells.mean, cells.w, cells.h);
    let scale = 360.0 / rows.max(cols).max(1) as f64;
    let css_w = ((cols as f64 * scale) as u32).max(8);
    let missing = if cells.mean.iter().any(Option::is_none) {
        r#"<span class="hm-none" title="cells with no finite value">■ none</span>"#
    } else {
        ""
    };
    let (lo_text, hi_text) = if lo.is_finite() { (plot::num(lo), plot::num(hi)) } else { ("–".into(), "–".into()) };
    let caption = plot::heatmap_caption(rows, cols, cells.w, cells.h, lo, hi);
    let averaged = (rows as usize) > cells.h || (cols as usize) > cells.w;
    let html = format!(
        r#"<div class="heat"><canvas class="heatmap" id="{id}" width="{w}" height="{h}" style="width:{css_w}px;height:{}px" aria-label="{} heatmap {rows}×{cols}"></canvas><div class="hm-legend" id="{id}-legend" data-lo="{lo}" data-hi="{hi}" style="width:{}px">{}<span class="mono lo">{lo_text}</span><i style="background:{}"></i><span class="mono hi">{hi_text}</span>{missing}</div><div class="hm-caption" id="{id}-caption" data-averaged="{averaged}">{}</div></div>"#,
        ((rows as f64 * scale) as u32).max(8),
        esc(label),
        css_w.max(200),
        if averaged { r#"<span class="hm-what">block means</span>"# } else { "" },
        plot::ramp_css(),
        esc(&caption),
    );
    PENDING.with(|p| p.borrow_mut().push((id.clone(), w, h, px)));
    HEAT.with(|m| m.borrow_mut().insert(id, cells));
    html
}

/// The tooltip's text for the cell under client point `(x, y)` of heatmap canvas `canvas`, with
/// the cell's source row and column (its first ones) and its value.
fn heat_tip(canvas: &web_sys::Element, x: f64, y: f64) -> Option<(String, u64, u64, f64)> {
    let r = canvas.get_bounding_client_rect();
    HEAT.with(|m| {
        let m = m.borrow();
        let c = m.get(&canvas.id())?;
        let fx = ((x - r.left()) / r.width().max(1.0)).clamp(0.0, 0.999_999);
        let fy = ((y - r.top()) / r.height().max(1.0)).clamp(0.0, 0.999_999);
        let (cx, cy) = ((fx * c.w as f64) as usize, (fy * c.h as f64) as usize);
        let i = cy * c.w + cx;
        let (r0, r1) = plot::bucket_range(cy, c.h, c.rows as usize);
        let (c0, c1) = plot::bucket_range(cx, c.w, c.cols as usize);
        let value = c.mean.get(i).copied().flatten();
        let at = if r1 - r0 <= 1 && c1 - c0 <= 1 {
            format!("[{r0}, {c0}]")
        } else {
            format!("rows {r0}–{}, cols {c0}–{}", r1 - 1, c1 - 1)
        };
        let text = match (value, &c.range) {
            (None, _) => format!("{at}: no finite value"),
            (Some(v), _) if r1 - r0 <= 1 && c1 - c0 <= 1 => format!("{at} = {}", plot::num(v)),
            (Some(v), Some((lo, hi))) => format!(
                "{at}: mean {} (min {}, max {})",
                plot::num(v),
                lo.get(i).copied().flatten().map(plot::num).unwrap_or_default(),
                hi.get(i).copied().flatten().map(plot::num).unwrap_or_default()
            ),
            (Some(v), None) => format!("{at}: mean {}", plot::num(v)),
        };
        Some((text, r0 as u64, c0 as u64, value.unwrap_or(f64::NAN)))
    })
}

/// The page's one tooltip (created on first use), placed by the pointer.
fn tooltip() -> Option<web_sys::HtmlElement> {
    if let Some(t) = by_id("tip") {
        return Some(t);
    }
    let t = document().create_element("div").ok()?;
    t.set_id("tip");
    t.set_class_name("tip mono");
    let _ = t.set_attribute("role", "tooltip");
    let _ = t.set_attribute("hidden", "");
    document().body()?.append_child(&t).ok()?;
    t.dyn_into().ok()
}

fn show_tip(text: &str, x: f64, y: f64) -> Option<web_sys::HtmlElement> {
    let t = tooltip()?;
    t.set_text_content(Some(text));
    t.set_hidden(false);
    let st = t.style();
    let _ = st.set_property("left", &format!("{}px", x + 14.0));
    let _ = st.set_property("top", &format!("{}px", y + 14.0));
    Some(t)
}

/// Hides the tooltip (and a plot's cursor line): the pointer left, or what it pointed at is gone.
pub(crate) fn hide_tip() {
    if let Some(t) = by_id("tip") {
        if !t.hidden() {
            t.set_hidden(true);
        }
    }
    if let Ok(Some(line)) = document().query_selector("line.hover-x[visibility='visible']") {
        let _ = line.set_attribute("visibility", "hidden");
    }
}

/// Values under the pointer: a heatmap's cell, a plot's point (any element with `data-tips`).
fn hovered(ev: web_sys::Event) {
    let ev: web_sys::MouseEvent = ev.unchecked_into();
    let Some(target) = ev.target().and_then(|t| t.dyn_into::<web_sys::Element>().ok()) else { return };
    let (x, y) = (ev.client_x() as f64, ev.client_y() as f64);
    if target.tag_name() == "CANVAS" && target.class_list().contains("heatmap") {
        match heat_tip(&target, x, y) {
            Some((text, row, col, value)) => {
                if let Some(t) = show_tip(&text, x, y) {
                    let _ = t.set_attribute("data-for", &target.id());
                    let _ = t.set_attribute("data-row", &row.to_string());
                    let _ = t.set_attribute("data-col", &col.to_string());
                    let _ = t.set_attribute("data-value", &value.to_string());
                }
            }
            None => hide_tip(),
        }
        return;
    }
    if let Some(tips) = target.get_attribute("data-tips") {
        let r = target.get_bounding_client_rect();
        let parts: Vec<&str> = tips.split('|').collect();
        let n = parts.len().max(1);
        let i = (((x - r.left()) / r.width().max(1.0)) * n as f64).floor().clamp(0.0, (n - 1) as f64) as usize;
        if let Some(t) = show_tip(parts.get(i).copied().unwrap_or_default(), x, y) {
            let _ = t.set_attribute("data-for", "plot");
            let _ = t.set_attribute("data-index", &i.to_string());
        }
        // The cursor line at the point's centre, in the plot's own units.
        let attr = |a: &str| target.get_attribute(a).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        let cx = attr("x") + (i as f64 + 0.5) / n as f64 * attr("width");
        if let Some(line) = target.previous_element_sibling().filter(|l| l.class_list().contains("hover-x")) {
            let _ = line.set_attribute("x1", &format!("{cx:.1}"));
            let _ = line.set_attribute("x2", &format!("{cx:.1}"));
            let _ = line.set_attribute("visibility", "visible");
        }
        return;
    }
    hide_tip();
}

/// Paints heatmaps whose canvases were just inserted.
pub fn draw_pending_heatmaps() {
    let pending = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
    for (id, w, h, px) in pending {
        let Some(canvas) = by_id(&id).and_then(|e| e.dyn_into::<web_sys::HtmlCanvasElement>().ok()) else { continue };
        let Ok(Some(ctx)) = canvas.get_context("2d") else { continue };
        let ctx: web_sys::CanvasRenderingContext2d = ctx.unchecked_into();
        if let Ok(img) = web_sys::ImageData::new_with_u8_clamped_array_and_sh(Clamped(&px), w, h) {
            let _ = ctx.put_image_data(&img, 0.0, 0.0);
        }
    }
}

pub fn render_bindings() {
    let html = with_app(|app| {
        let open = app.open.as_ref()?;
        let a = open.loaded.archive();
        if a.binding_count() == 0 {
            return Some(
                r#"<div class="pane"><p class="muted">This archive declares no named bindings.</p></div>"#.to_string(),
            );
        }
        let mut rows = String::new();
        for b in a.bindings() {
            let r = a.region(b.region);
            // Regions up to 64 MiB are read back to tell an input the capture called `inout`.
            let small = |blob: &Option<shared::archive::Blob>| {
                blob.as_ref().filter(|b| b.len() <= 64 << 20).and_then(|b| b.decode().ok())
            };
            let (direction, derived) = if b.direction == shared::archive::Direction::InOut {
                let (i, e) = (small(&r.initial), small(&r.expected));
                crate::model::binding_direction(b.direction, i.as_deref(), e.as_deref())
            } else {
                (b.direction, false)
            };
            let title = if derived {
                r#" title="inout (unchanged): declared inout, but its expected contents are its initial ones, so the replay only reads it""#
            } else {
                ""
            };
            let _ = write!(
                rows,
                r#"<div class="row" data-goto-region="{}"><span class="mono" title="{name}">{name}</span><span class="dir-{}"{title}>{}{}</span><span class="mono" title="{region}">{region}</span><span>{}</span><span>{}</span><span title="{shape}">{shape}</span></div>"#,
                r.id,
                direction.name(),
                direction.name(),
                if derived { " (unchanged)" } else { "" },
                bytes_human(r.size),
                r.dtype.name(),
                name = esc(b.name),
                region = esc(r.name),
                shape = shape_text(&r),
            );
        }
        Some(format!(
            r#"<div class="table bindings"><div class="row head"><span>binding</span><span>direction</span><span>region</span><span>size</span><span>dtype</span><span>shape</span></div><div class="tbody">{rows}</div></div>"#
        ))
    });
    if let Some(h) = html {
        set_html("main-view", &h);
    }
}

pub fn wire() {
    let doc: web_sys::EventTarget = document().into();
    listen(&doc, "mousemove", false, hovered);
    listen(&doc, "mouseleave", false, |_| hide_tip());
    listen(&doc, "click", false, |ev| {
        if let Some(el) = dom::closest_with(&ev, "data-kernel") {
            if let Some(id) = el.get_attribute("data-kernel").and_then(|s| s.parse().ok()) {
                with_app(|app| app.open.as_mut().map(|o| o.selected_kernel = id));
                render_kernels();
            }
        } else if let Some(el) = dom::closest_with(&ev, "data-region") {
            if let Some(id) = el.get_attribute("data-region").and_then(|s| s.parse().ok()) {
                with_app(|app| app.open.as_mut().map(|o| o.selected_region = id));
                render_regions();
            }
        } else if let Some(el) = dom::closest_with(&ev, "data-goto-region") {
            if let Some(id) = el.get_attribute("data-goto-region").and_then(|s| s.parse().ok()) {
                with_app(|app| app.open.as_mut().map(|o| o.selected_region = id));
                super::show_tab(super::Tab::Regions);
            }
        }
    });
    listen(&doc, "keydown", false, |ev| {
        let ev: web_sys::KeyboardEvent = ev.unchecked_into();
        let target =
            ev.target().and_then(|t| t.dyn_into::<web_sys::Element>().ok()).map(|e| e.id()).unwrap_or_default();
        let delta: i64 = match ev.key().as_str() {
            "ArrowDown" | "j" => 1,
            "ArrowUp" | "k" => -1,
            _ => return,
        };
        let moved = with_app(|app| {
            let open = app.open.as_mut()?;
            let a = open.loaded.archive();
            match target.as_str() {
                "kernel-list" => {
                    let n = a.kernel_count() as i64;
                    open.selected_kernel = (open.selected_kernel as i64 + delta).clamp(0, (n - 1).max(0)) as u32;
                    Some("k")
                }
                "region-list" => {
                    let n = a.region_count() as i64;
                    open.selected_region = (open.selected_region as i64 + delta).clamp(0, (n - 1).max(0)) as u32;
                    Some("r")
                }
                _ => None,
            }
        });
        let list = match moved {
            Some("k") => {
                render_kernels();
                "kernel-list"
            }
            Some("r") => {
                render_regions();
                "region-list"
            }
            _ => return,
        };
        ev.prevent_default();
        if let Some(l) = by_id(list) {
            let _ = l.focus();
            if let Some(s) = document().query_selector(&format!("#{list} .sel")).ok().flatten() {
                s.scroll_into_view_with_bool(false);
            }
        }
    });
}
