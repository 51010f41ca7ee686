//! The page: state, routing and event wiring. Views render HTML strings from [`crate::model`];
//! events are delegated from a few long-lived listeners through `data-*` attributes, so
//! re-rendering a view never leaks or re-attaches handlers.
//!
//! Routes: `/` (archives on the host, upload, open a local file), `/archives/{id}` (an archive's
//! views; the tab is the URL's fragment), `/sessions/{id}` (a replay session, live).

mod api;
mod browser_replay;
mod compare_view;
mod dom;
mod graph_view;
mod ops;
mod replay;
mod sessions;
mod timeline_view;
mod views;

use std::cell::RefCell;
use std::fmt::Write as _;
use std::rc::Rc;

use shared::protocol::ArchiveInfo;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use crate::model::{self, bytes_human, esc, LoadedArchive, OpFilter};
use dom::{by_id, document, listen, set_html, window};

/// Where the open archive came from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// A file opened from disk, parsed here and never uploaded.
    Local { file_name: String },
    /// An archive stored on the host.
    Host { info: ArchiveInfo },
}

impl Source {
    fn label(&self) -> &str {
        match self {
            Source::Local { file_name } => file_name,
            Source::Host { info } => &info.name,
        }
    }
}

/// The open archive and everything derived from it that views reuse.
pub struct Open {
    pub loaded: Rc<LoadedArchive>,
    pub source: Source,
    pub depths: Vec<u16>,
    pub filter: OpFilter,
    /// Op ids passing `filter` (all ops when it is empty).
    pub visible: Vec<u32>,
    pub selected: Option<u32>,
    pub selected_kernel: u32,
    pub selected_region: u32,
    pub tab: Tab,
}

/// The views of an archive page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tab {
    Ops,
    Kernels,
    Regions,
    Bindings,
    Graph,
    Replay,
    Timeline,
}

impl Tab {
    pub const ALL: [Tab; 7] =
        [Tab::Ops, Tab::Kernels, Tab::Regions, Tab::Bindings, Tab::Graph, Tab::Replay, Tab::Timeline];

    pub fn name(self) -> &'static str {
        match self {
            Tab::Ops => "ops",
            Tab::Kernels => "kernels",
            Tab::Regions => "regions",
            Tab::Bindings => "bindings",
            Tab::Graph => "graph",
            Tab::Replay => "replay",
            Tab::Timeline => "timeline",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Tab::Ops => "Ops",
            Tab::Kernels => "Kernels",
            Tab::Regions => "Regions",
            Tab::Bindings => "Bindings",
            Tab::Graph => "Graph",
            Tab::Replay => "Replay",
            Tab::Timeline => "Timeline",
        }
    }

    pub fn from_name(s: &str) -> Option<Tab> {
        Tab::ALL.into_iter().find(|t| t.name() == s)
    }
}

#[derive(Default)]
pub struct App {
    pub open: Option<Open>,
    /// Bumped on every navigation so that a slow fetch for a page left behind is dropped.
    pub generation: u64,
}

thread_local! {
    static APP: RefCell<App> = RefCell::new(App::default());
}

pub fn with_app<R>(f: impl FnOnce(&mut App) -> R) -> R {
    APP.with(|a| f(&mut a.borrow_mut()))
}

#[wasm_bindgen(start)]
pub fn start() {
    wire_files();
    wire_drop();
    wire_links();
    ops::wire();
    views::wire();
    graph_view::wire();
    replay::wire();
    sessions::wire();
    timeline_view::wire();
    wire_tabs();
    route();
    document().body().map(|b| b.set_attribute("data-ready", "1"));
}

thread_local! {
    /// A line for the status bar once the next host archive has loaded.
    static STATUS_AFTER_LOAD: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// The header's status line; its tooltip holds it whole where a narrow window shortens it.
pub fn set_status(text: &str) {
    set_html("status", &esc(text));
    if let Some(s) = by_id("status") {
        let _ = s.set_attribute("title", text);
    }
}

// ---- routing ----

/// Goes to `path` (a same-origin path) without reloading the page.
pub fn navigate(path: &str) {
    let path = api::url(path);
    let _ = window().history().and_then(|h| h.push_state_with_url(&JsValue::NULL, "", Some(&path)));
    route();
}

fn route() {
    let generation = with_app(|app| {
        app.generation += 1;
        app.generation
    });
    let path = window().location().pathname().unwrap_or_default();
    let segs: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        [] => render_home(None),
        ["archives", id] => {
            let id = id.to_string();
            wasm_bindgen_futures::spawn_local(async move {
                if ensure_host_archive(&id, generation).await {
                    // The tab is the URL's fragment: a fragment typed or followed on the archive
                    // already open (a popstate with no new page) opens its tab.
                    if let Some(tab) = tab_of_fragment() {
                        with_app(|app| app.open.as_mut().map(|o| o.tab = tab));
                    }
                    render_archive();
                    if let Some(note) = STATUS_AFTER_LOAD.with(|n| n.borrow_mut().take()) {
                        set_status(&note);
                    }
                }
            });
        }
        ["sessions", id] => {
            let id = id.to_string();
            wasm_bindgen_futures::spawn_local(replay::open_session(id, generation));
        }
        _ => {
            set_html("crumb", "");
            set_html(
                "main",
                &format!(
                    r#"<section class="home"><div class="error" role="alert">There is no page at <code>{}</code>. <a href="/" data-link>Go to the archive list</a>.</div></section>"#,
                    esc(&path)
                ),
            );
        }
    }
}

/// The tab the URL's fragment names, if any.
fn tab_of_fragment() -> Option<Tab> {
    window().location().hash().ok().and_then(|h| Tab::from_name(h.trim_start_matches('#')))
}

pub(crate) fn current_generation() -> u64 {
    with_app(|app| app.generation)
}

fn wire_links() {
    let doc: web_sys::EventTarget = document().into();
    listen(&doc, "click", false, |ev| {
        let mev: &web_sys::MouseEvent = ev.unchecked_ref();
        if mev.ctrl_key() || mev.meta_key() || mev.shift_key() || mev.button() != 0 {
            return;
        }
        if let Some(a) = dom::closest_with(&ev, "data-link") {
            if let Some(href) = a.get_attribute("href") {
                ev.prevent_default();
                navigate(&href);
            }
            return;
        }
        // A row that opens a page, unless the click was on one of its own links or buttons.
        let on_control = ev
            .target()
            .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
            .and_then(|e| e.closest("a, button, input, select").ok().flatten())
            .is_some();
        if let (Some(row), false) = (dom::closest_with(&ev, "data-href"), on_control) {
            if let Some(href) = row.get_attribute("data-href") {
                navigate(&href);
            }
        }
    });
    listen(&window().into(), "popstate", false, |_| route());
}

// ---- home: the host's archives, upload, local open ----

fn render_home(error: Option<String>) {
    with_app(|app| app.open = None);
    set_html("crumb", "");
    set_status("");
    let err = error.unwrap_or_default();
    set_html(
        "main",
        &format!(
            r#"<section class="home">
  <div class="drop-targets">
    <div class="dropzone" data-drop="upload" id="upload-zone">
      <p class="big">Upload to this host</p>
      <p>Drop a <code>.recap</code> here or <button class="primary" data-action="upload-file">Upload…</button></p>
      <p class="muted">An NVIDIA Warp capture converts on upload: a <code>.zip</code> or <code>.tar</code> of <code>NAME.wrp</code>, <code>NAME_modules/</code> and, for CPU captures, <code>ptx/</code></p>
      <p class="muted">Stored on the host, listed below, replayable on its devices, shareable by link.</p>
      <div class="upload-progress" id="upload-progress" hidden><progress id="upload-bar" max="1" value="0"></progress><span class="mono" id="upload-text"></span></div>
    </div>
    <div class="dropzone" data-drop="local" id="local-zone">
      <p class="big">Open in this browser only</p>
      <p>Drop a <code>.recap</code> here or <button data-action="open-file">Open file…</button></p>
      <p class="muted">Parsed and replayed right here; nothing is uploaded.</p>
    </div>
  </div>
  <div id="home-error">{err}</div>
  <h2>Archives on this host</h2>
  <div class="table archives">
    <div class="row head"><span>name</span><span>size</span><span>ops</span><span>kernels</span><span>regions</span><span>uploaded</span><span>id</span><span></span></div>
    <div class="tbody" id="archive-list"><p class="muted pad">Loading…</p></div>
  </div>
  {sessions}
</section>"#,
            sessions = sessions::section_html()
        ),
    );
    wasm_bindgen_futures::spawn_local(load_archive_list());
    wasm_bindgen_futures::spawn_local(sessions::load());
}

pub(crate) async fn load_archive_list() {
    let list = api::get_json::<Vec<ArchiveInfo>>("/api/archives").await;
    let html = match list {
        Ok(list) if list.is_empty() => {
            r#"<p class="muted pad">No archives on this host yet: upload one above.</p>"#.to_string()
        }
        Ok(list) => {
            let mut h = String::new();
            for a in list {
                // The other names the same bytes were uploaded under, after the one it is stored as.
                let aliases = match a.aliases.is_empty() {
                    true => String::new(),
                    false => {
                        let all = a.aliases.join(", ");
                        format!(
                            r#" <span class="aliases muted" title="also uploaded as {t}" data-archive-aliases="{id}">also {t}</span>"#,
                            t = esc(&all),
                            id = esc(&a.id)
                        )
                    }
                };
                let _ = write!(
                    h,
                    r#"<div class="row" data-href="/archives/{id}" data-archive-id="{id}"><span class="mono"><a class="name" href="{href}" data-link title="{name}">{name}</a>{aliases}</span><span>{}</span><span>{}</span><span>{}</span><span>{}</span><span>{}</span><span class="mono muted">{}</span><span class="actions"><a class="btn" download href="{raw}" title="download the archive" data-archive-download="{id}">Download</a><button data-archive-delete="{id}" title="delete the archive from this host (its sessions keep their results)">Delete</button></span></div>"#,
                    bytes_human(a.size),
                    a.ops,
                    a.kernels,
                    a.regions,
                    esc(&model::when(&a.uploaded_at)),
                    esc(&a.id[..a.id.len().min(12)]),
                    name = esc(&a.name),
                    href = esc(&api::url(&format!("/archives/{}", a.id))),
                    id = esc(&a.id),
                    raw = esc(&api::url(&format!("/api/archives/{}/raw", a.id))),
                );
            }
            h
        }
        Err(e) => format!(
            r#"<p class="muted pad">The host's archive list is not available ({}). Local files still open here.</p>"#,
            esc(&e)
        ),
    };
    set_html("archive-list", &html);
}

fn show_home_error(html: String) {
    if by_id("home-error").is_none() {
        render_home(Some(html));
    } else {
        set_html("home-error", &html);
    }
}

fn start_upload(file: web_sys::File) {
    if by_id("upload-zone").is_none() {
        navigate("/");
    }
    let name = file.name();
    let total = file.size();
    set_html("home-error", "");
    if let Some(p) = by_id("upload-progress") {
        p.set_hidden(false);
    }
    let show = |sent: f64, total: f64, text: &str| {
        if let Some(bar) = by_id("upload-bar") {
            let _ = bar.set_attribute("max", &total.max(1.0).to_string());
            let _ = bar.set_attribute("value", &sent.to_string());
        }
        set_html("upload-text", &esc(text));
    };
    show(0.0, total, &format!("{name}: starting"));
    let started = api::upload(
        &file,
        move |sent, total| {
            let pct = if total > 0.0 { sent / total * 100.0 } else { 100.0 };
            show(
                sent,
                total,
                &format!("{}: {} of {} ({pct:.0}%)", name, bytes_human(sent as u64), bytes_human(total as u64)),
            );
            // Kept on the body so it outlives the page change that follows the upload.
            if let Some(b) = document().body() {
                let _ = b.set_attribute("data-upload-progress", &format!("{pct:.0}"));
            }
        },
        move |result| match result {
            Ok(info) => {
                // A duplicate of a stored archive says under which name it is stored (the host's
                // note); a new one, its name and id.
                let text = info.note.clone().unwrap_or_else(|| format!("stored as {} ({})", info.name, info.id));
                set_html("upload-text", &esc(&text));
                // What the host did with it (a Warp capture converted) goes in the status line once
                // the archive is on screen.
                STATUS_AFTER_LOAD.with(|n| *n.borrow_mut() = info.note.clone());
                navigate(&format!("/archives/{}", info.id));
            }
            Err(e) => {
                if let Some(p) = by_id("upload-progress") {
                    p.set_hidden(true);
                }
                show_home_error(format!(
                    r#"<div class="error" id="upload-error" role="alert">The upload was refused: {}</div>"#,
                    esc(&e)
                ));
            }
        },
    );
    if let Err(e) = started {
        show_home_error(format!(r#"<div class="error" role="alert">Cannot upload: {}</div>"#, esc(&e)));
    }
}

/// An error box that names what is wrong and where, so that a bad file explains itself.
fn format_error_html(file: &str, e: &shared::archive::FormatError) -> String {
    format!(
        r#"<div class="error" id="load-error" role="alert" data-section="{}" data-offset="{}">
  <b>{}</b> is not a valid recap archive.
  <dl><dt>section</dt><dd>{}</dd><dt>offset</dt><dd>byte {}</dd><dt>reason</dt><dd>{}</dd></dl>
</div>"#,
        esc(e.section),
        e.offset,
        esc(file),
        esc(e.section),
        e.offset,
        esc(&e.reason)
    )
}

fn wire_files() {
    for (id, upload) in [("file-input", false), ("upload-input", true)] {
        let Some(input) = by_id(id) else { continue };
        listen(&input.clone(), "change", false, move |_| {
            let input: web_sys::HtmlInputElement = input.clone().unchecked_into();
            if let Some(file) = input.files().and_then(|f| f.get(0)) {
                if upload {
                    start_upload(file);
                } else {
                    wasm_bindgen_futures::spawn_local(open_local_file(file));
                }
            }
            input.set_value("");
        });
    }
    let doc: web_sys::EventTarget = document().into();
    listen(&doc, "click", false, |ev| {
        if let Some(el) = dom::closest_with(&ev, "data-action") {
            let input = match el.get_attribute("data-action").as_deref() {
                Some("open-file") => "file-input",
                Some("upload-file") => "upload-input",
                _ => return,
            };
            if let Some(i) = by_id(input) {
                i.click();
            }
        }
    });
}

fn wire_drop() {
    let doc: web_sys::EventTarget = document().into();
    listen(&doc, "dragover", false, |ev| {
        ev.prevent_default();
        if let Some(b) = document().body() {
            let _ = b.class_list().add_1("dragging");
        }
        let zone = dom::closest_with(&ev, "data-drop").and_then(|z| z.get_attribute("data-drop"));
        if let Some(b) = document().body() {
            let _ = b.set_attribute("data-drop-target", zone.as_deref().unwrap_or("local"));
        }
    });
    listen(&doc, "dragleave", false, |ev| {
        let ev: web_sys::DragEvent = ev.unchecked_into();
        // Leaving to outside the window has no related target.
        if ev.related_target().is_none() {
            if let Some(b) = document().body() {
                let _ = b.class_list().remove_1("dragging");
            }
        }
    });
    listen(&doc, "drop", false, |ev| {
        ev.prevent_default();
        if let Some(b) = document().body() {
            let _ = b.class_list().remove_1("dragging");
        }
        let upload =
            dom::closest_with(&ev, "data-drop").and_then(|z| z.get_attribute("data-drop")).as_deref() == Some("upload");
        let ev: web_sys::DragEvent = ev.unchecked_into();
        if let Some(file) = ev.data_transfer().and_then(|d| d.files()).and_then(|f| f.get(0)) {
            if upload {
                start_upload(file);
            } else {
                wasm_bindgen_futures::spawn_local(open_local_file(file));
            }
        }
    });
}

// ---- opening archives ----

async fn read_file(file: &web_sys::File) -> Result<Vec<u8>, String> {
    let buf = JsFuture::from(file.array_buffer()).await.map_err(|e| format!("reading {}: {e:?}", file.name()))?;
    Ok(js_sys::Uint8Array::new(&buf).to_vec())
}

async fn open_local_file(file: web_sys::File) {
    let name = file.name();
    set_status(&format!("reading {name}…"));
    let bytes = match read_file(&file).await {
        Ok(b) => b,
        Err(e) => {
            set_status("");
            show_home_error(format!(r#"<div class="error" role="alert">{}</div>"#, esc(&e)));
            return;
        }
    };
    // A local file has no URL of its own: the page shows it at `/` until the user navigates away.
    if window().location().pathname().unwrap_or_default() != "/" {
        let _ = window().history().and_then(|h| h.push_state_with_url(&JsValue::NULL, "", Some(&api::url("/"))));
    }
    with_app(|app| app.generation += 1);
    open_bytes(bytes, Source::Local { file_name: name });
}

/// Shows a page-level error with a way back.
pub fn show_page_error(html: &str) {
    set_html("crumb", "");
    set_status("");
    set_html(
        "main",
        &format!(
            r#"<section class="home"><div class="error" id="page-error" role="alert">{html}. <a href="/" data-link>Back to the archive list</a>.</div></section>"#
        ),
    );
}

/// Makes host archive `id` the open archive (downloading and parsing it unless it already is).
/// False when it could not be opened (the page says why) or the user navigated away meanwhile.
pub async fn ensure_host_archive(id: &str, generation: u64) -> bool {
    let already =
        with_app(|app| app.open.as_ref().is_some_and(|o| matches!(&o.source, Source::Host { info } if info.id == id)));
    if already {
        return true;
    }
    set_html("crumb", &format!(r#"<span class="name">{}</span>"#, esc(id)));
    set_html("main", r#"<p class="muted pad">Loading the archive…</p>"#);
    set_status("downloading…");
    let info = api::get_json::<ArchiveInfo>(&format!("/api/archives/{id}")).await;
    let bytes = match info {
        Ok(info) => api::get_bytes(&format!("/api/archives/{id}/raw")).await.map(|b| (info, b)),
        Err(e) => Err(e),
    };
    if current_generation() != generation {
        return false;
    }
    set_status("");
    match bytes {
        Ok((info, bytes)) => match parse(bytes, Source::Host { info }) {
            Ok(()) => true,
            Err(e) => {
                show_page_error(&format!(
                    "The host's archive <code>{}</code> does not open here: {}",
                    esc(id),
                    esc(&e.to_string())
                ));
                false
            }
        },
        Err(e) => {
            show_page_error(&format!("Cannot open archive <code>{}</code>: {}", esc(id), esc(&e)));
            false
        }
    }
}

/// Parses a local file's bytes and shows the archive page, or the validator's error.
pub fn open_bytes(bytes: Vec<u8>, source: Source) {
    let label = source.label().to_string();
    match parse(bytes, source) {
        Ok(()) => render_archive(),
        Err(e) => {
            set_status("");
            render_home(Some(format_error_html(&label, &e)));
        }
    }
}

/// Parses archive bytes into the open archive (timed with performance marks for the benchmark).
fn parse(bytes: Vec<u8>, source: Source) -> Result<(), shared::archive::FormatError> {
    dom::mark("recap:parse-start");
    let loaded = LoadedArchive::load(bytes);
    dom::mark("recap:parse-end");
    dom::measure("recap:parse", "recap:parse-start", "recap:parse-end");
    match loaded {
        Ok(loaded) => {
            let depths = model::op_depths(loaded.archive());
            let visible = (0..loaded.archive().op_count() as u32).collect();
            let tab = tab_of_fragment().unwrap_or(Tab::Ops);
            with_app(|app| {
                app.open = Some(Open {
                    loaded: Rc::new(loaded),
                    source,
                    depths,
                    filter: OpFilter::default(),
                    visible,
                    selected: None,
                    selected_kernel: 0,
                    selected_region: 0,
                    tab,
                })
            });
            Ok(())
        }
        Err(e) => Err(e),
    }
}

pub fn render_archive() {
    let header = with_app(|app| {
        let open = app.open.as_ref()?;
        let s = model::summary(open.loaded.archive());
        let (name, tag) = match &open.source {
            Source::Local { file_name } => (
                file_name.as_str(),
                r#"<span class="tag" title="opened from disk, parsed in this browser, not uploaded">local</span>"#
                    .to_string(),
            ),
            Source::Host { info } => (
                info.name.as_str(),
                format!(
                    r#"<span class="tag mono" title="{}">{}</span>"#,
                    esc(&info.hash),
                    esc(&info.id[..info.id.len().min(12)])
                ),
            ),
        };
        Some(format!(
            r#"<a href="/" data-link class="up">archives</a><span class="sep">/</span><span class="name" title="{name}">{name}</span>{tag}
<span class="stat">{}</span><span class="stat">{}</span><span class="stat">{}</span><span class="stat">{}</span><span class="stat">{}</span><span class="stat">format {}</span>"#,
            model::count(s.ops as u64, "op", "ops"),
            model::count(s.launches as u64, "launch", "launches"),
            kernels_stat(open.loaded.archive()),
            model::count(s.regions as u64, "region", "regions"),
            bytes_human(s.bytes),
            s.version,
            name = esc(name),
        ))
    });
    let Some(header) = header else { return };
    set_html("crumb", &header);
    set_status("");
    set_html(
        "main",
        r#"<div class="archive"><nav class="tabs" id="tabs" role="tablist" aria-label="archive views"></nav><div class="view" id="main-view"></div></div>"#,
    );
    let tab = with_app(|app| app.open.as_ref().map(|o| o.tab)).unwrap_or(Tab::Ops);
    show_tab(tab);
    dom::mark("recap:archive-painted");
    // The frame after the DOM is built is when the page is on screen: the benchmark reads this.
    let cb = Closure::once_into_js(|| dom::mark("recap:archive-frame"));
    let _ = window().request_animation_frame(cb.unchecked_ref());
}

/// The header's kernel count: the kernels some op launches, and apart those none does (a module
/// brings every entry it defines, launched or not).
fn kernels_stat(a: &shared::archive::Archive) -> String {
    let launches = views::launches_per_kernel(a);
    let unused = launches.iter().filter(|&&n| n == 0).count() as u64;
    let launched = launches.len() as u64 - unused;
    if unused == 0 {
        model::count(launched, "kernel", "kernels")
    } else {
        format!(
            r#"<span title="the archive holds {} kernels; {unused} of them no op launches">{} launched ({unused} unused)</span>"#,
            launches.len(),
            model::count(launched, "kernel", "kernels")
        )
    }
}

/// Switches the archive page to `tab` and renders it.
pub fn show_tab(tab: Tab) {
    with_app(|app| app.open.as_mut().map(|o| o.tab = tab));
    // A tab changed by key leaves the pointer where it was: a tooltip of the old view must go.
    views::hide_tip();
    let is_host = with_app(|app| app.open.as_ref().is_some_and(|o| matches!(o.source, Source::Host { .. })));
    let path = window().location().pathname().unwrap_or_default();
    if is_host && path.starts_with("/archives/") {
        let _ = window()
            .history()
            .and_then(|h| h.replace_state_with_url(&JsValue::NULL, "", Some(&format!("#{}", tab.name()))));
    }
    // The label alone: a digit beside "Kernels" would read as how many there are. The key that
    // opens a tab is in its tooltip and its aria-keyshortcuts.
    let mut html = String::new();
    for (i, t) in Tab::ALL.into_iter().enumerate() {
        let on = t == tab;
        let _ = write!(
            html,
            r#"<button role="tab" data-tab="{}" aria-selected="{on}" class="{}" title="{}: press {} to open" aria-keyshortcuts="{}">{}</button>"#,
            t.name(),
            if on { "on" } else { "" },
            t.label(),
            i + 1,
            i + 1,
            t.label(),
        );
    }
    set_html("tabs", &html);
    match tab {
        Tab::Ops => ops::render(),
        Tab::Kernels => views::render_kernels(),
        Tab::Regions => views::render_regions(),
        Tab::Bindings => views::render_bindings(),
        Tab::Graph => graph_view::render(),
        Tab::Replay => replay::render(),
        Tab::Timeline => replay::render_timeline_tab(),
    }
}

fn wire_tabs() {
    let doc: web_sys::EventTarget = document().into();
    listen(&doc, "click", false, |ev| {
        if let Some(el) = dom::closest_with(&ev, "data-tab") {
            if let Some(t) = el.get_attribute("data-tab").and_then(|s| Tab::from_name(&s)) {
                show_tab(t);
            }
        }
    });
    listen(&doc, "keydown", false, |ev| {
        let ev: web_sys::KeyboardEvent = ev.unchecked_into();
        if ev.ctrl_key() || ev.meta_key() || ev.alt_key() {
            return;
        }
        let typing = ev
            .target()
            .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
            .is_some_and(|e| matches!(e.tag_name().as_str(), "INPUT" | "SELECT" | "TEXTAREA"));
        if typing || by_id("tabs").is_none() {
            return;
        }
        if let Some(t) = ev.key().parse::<usize>().ok().and_then(|n| n.checked_sub(1)).and_then(|i| Tab::ALL.get(i)) {
            ev.prevent_default();
            show_tab(*t);
        }
    });
}

/// For the benchmark: opens `bytes` as the page does (the bytes arrive in wasm memory in one
/// copy, as a file read does) and returns `[op_count, open_ms, depths_ms]`: the structure check
/// of `Archive::open`, then the nesting depths the op table needs before its first row.
#[wasm_bindgen]
pub fn bench_parse(bytes: Vec<u8>) -> Result<Vec<f64>, JsValue> {
    let t0 = dom::now_ms();
    let loaded = LoadedArchive::load(bytes).map_err(|e| JsValue::from_str(&e.to_string()))?;
    let t1 = dom::now_ms();
    let depths = model::op_depths(loaded.archive());
    let t2 = dom::now_ms();
    Ok(vec![depths.len() as f64, t1 - t0, t2 - t1])
}
