//! Thin helpers over web-sys: the views build HTML strings and hand them to the DOM in one go,
//! which is both the fastest way to fill a table and the least code.

use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{Document, Element, HtmlElement, Window};

pub fn window() -> Window {
    web_sys::window().expect("a browser window")
}

pub fn document() -> Document {
    window().document().expect("a document")
}

pub fn by_id(id: &str) -> Option<HtmlElement> {
    document().get_element_by_id(id).and_then(|e| e.dyn_into().ok())
}

pub fn set_html(id: &str, html: &str) {
    if let Some(e) = by_id(id) {
        e.set_inner_html(html);
    }
}

/// Listens for `event` on `target` for the life of the page.
pub fn listen(target: &web_sys::EventTarget, event: &str, capture: bool, f: impl FnMut(web_sys::Event) + 'static) {
    let cb = Closure::<dyn FnMut(web_sys::Event)>::new(f);
    let _ = target.add_event_listener_with_callback_and_bool(event, cb.as_ref().unchecked_ref(), capture);
    cb.forget();
}

/// The nearest element at or above the event's target that has attribute `attr`.
pub fn closest_with(ev: &web_sys::Event, attr: &str) -> Option<Element> {
    let el: Element = ev.target()?.dyn_into().ok()?;
    el.closest(&format!("[{attr}]")).ok().flatten()
}

pub fn now_ms() -> f64 {
    window().performance().map(|p| p.now()).unwrap_or(0.0)
}

/// A performance mark the benchmark reads back through the WebDriver session.
pub fn mark(name: &str) {
    if let Some(p) = window().performance() {
        let _ = p.mark(name);
    }
}

pub fn measure(name: &str, start: &str, end: &str) {
    if let Some(p) = window().performance() {
        let _ = p.measure_with_start_mark_and_end_mark(name, start, end);
    }
}

pub fn log(msg: &str) {
    web_sys::console::log_1(&JsValue::from_str(msg));
}
