//! The host's sessions as lists: every session on the home page (filtered by archive and state,
//! refreshed while some are still queued or running), and an archive's own sessions on its Replay
//! tab. A session whose archive was deleted is still listed, under the name the archive had, and
//! still opens: its page shows its results from its log.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt::Write as _;

use shared::protocol::{ArchiveInfo, SessionInfo, SessionKind, SessionState};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use super::dom::{self, by_id, document, listen, set_html, window};
use super::{api, with_app};
use crate::model::esc;

#[derive(Default)]
struct Lists {
    /// Every session the host listed, newest first.
    sessions: Vec<SessionInfo>,
    /// The ids of the archives the host still stores.
    stored: BTreeSet<String>,
    /// Whether a refresh is already scheduled.
    polling: bool,
}

thread_local! {
    static LISTS: RefCell<Lists> = RefCell::new(Lists::default());
}

/// The home page's sessions section (filled by [`load`]).
pub fn section_html() -> String {
    r#"<h2>Sessions on this host</h2>
  <div class="toolbar session-filters">
    <label>archive <select id="session-archive" aria-label="sessions of archive"><option value="">all archives</option></select></label>
    <label>state <select id="session-state" aria-label="sessions in state"><option value="">any</option><option value="active">queued or running</option><option value="finished">finished</option><option value="failed">failed</option><option value="cancelled">cancelled</option></select></label>
    <span class="count" id="session-count"></span>
  </div>
  <div class="table sessions">
    <div class="row head"><span>state</span><span>verdict</span><span>archive</span><span>kind</span><span>device</span><span>iterations</span><span>started</span><span>took</span><span>id</span></div>
    <div class="tbody" id="session-list"><p class="muted pad">Loading…</p></div>
  </div>"#
        .to_string()
}

fn is_active(s: &SessionInfo) -> bool {
    matches!(s.state, SessionState::Queued | SessionState::Running)
}

/// The rows of `list`: each opens its session; `stored` says which archives still exist.
pub fn rows_html(list: &[&SessionInfo], stored: &BTreeSet<String>) -> String {
    let mut h = String::new();
    for s in list {
        let verdict = match (s.state, s.passed, s.kind) {
            (_, Some(true), SessionKind::Compare) => r#"<span class="badge pass">agree</span>"#,
            (_, Some(false), SessionKind::Compare) => r#"<span class="badge fail">differ</span>"#,
            (_, Some(true), _) => r#"<span class="badge pass">pass</span>"#,
            (_, Some(false), _) => r#"<span class="badge fail">fail</span>"#,
            (SessionState::Finished, None, _) => r#"<span class="muted">not checked</span>"#,
            _ => "",
        };
        let name = s.archive_name.as_deref().unwrap_or(&s.archive);
        let deleted = if stored.contains(&s.archive) {
            ""
        } else {
            r#" <span class="tag gone" title="the archive was deleted; the session keeps its results">deleted</span>"#
        };
        let device = match (&s.kind, &s.compare_with) {
            (SessionKind::Compare, Some(b)) => format!("{} vs {b}", s.device),
            _ => s.device.clone(),
        };
        let took = s
            .ended_at
            .as_deref()
            .and_then(|e| crate::model::seconds_between(&s.created_at, e))
            .map(|t| format!("{t} s"))
            .unwrap_or_default();
        let title = s.error.as_deref().map(|e| format!(r#" title="{}""#, esc(e))).unwrap_or_default();
        let _ = write!(
            h,
            r#"<a class="row" href="{href}" data-link data-session-id="{id}" data-session-state="{state}" data-archive="{archive}"{title}><span><span class="badge st-{state}">{state}</span></span><span>{verdict}</span><span class="mono" title="{name}">{name}{deleted}</span><span>{}</span><span class="mono" title="{device}">{device}</span><span>{}</span><span>{}</span><span>{took}</span><span class="mono muted">{}</span></a>"#,
            s.kind.name(),
            s.iterations,
            esc(&crate::model::when(&s.created_at)),
            esc(&s.id[..s.id.len().min(12)]),
            href = esc(&api::url(&format!("/sessions/{}", s.id))),
            id = esc(&s.id),
            name = esc(name),
            device = esc(&device),
            state = s.state.name(),
            archive = esc(&s.archive),
        );
    }
    h
}

/// Fetches the host's sessions and archives and fills the home page's list; while sessions are
/// queued or running, refreshes every 1.5 s for as long as the list is on screen.
pub async fn load() {
    let sessions = api::get_json::<Vec<SessionInfo>>("/api/sessions").await;
    let archives = api::get_json::<Vec<ArchiveInfo>>("/api/archives").await;
    match (sessions, archives) {
        (Ok(sessions), Ok(archives)) => {
            LISTS.with(|l| {
                let mut l = l.borrow_mut();
                l.sessions = sessions;
                l.stored = archives.into_iter().map(|a| a.id).collect();
            });
            fill_archive_filter();
            draw();
            poll_while_active();
        }
        (Err(e), _) | (_, Err(e)) => set_html(
            "session-list",
            &format!(r#"<p class="muted pad">The host's sessions are not available ({}).</p>"#, esc(&e)),
        ),
    }
}

fn poll_while_active() {
    let active = LISTS.with(|l| l.borrow().sessions.iter().any(is_active));
    let already = LISTS.with(|l| std::mem::replace(&mut l.borrow_mut().polling, active));
    if !active || already {
        return;
    }
    let cb = Closure::once_into_js(|| {
        LISTS.with(|l| l.borrow_mut().polling = false);
        if by_id("session-list").is_some() {
            wasm_bindgen_futures::spawn_local(load());
        }
    });
    let _ = window().set_timeout_with_callback_and_timeout_and_arguments_0(cb.unchecked_ref(), 1500);
}

fn select_value(id: &str) -> String {
    by_id(id).map(|e| e.unchecked_into::<web_sys::HtmlSelectElement>().value()).unwrap_or_default()
}

/// The archive filter's options: every archive some session used, by name, newest first.
fn fill_archive_filter() {
    let Some(sel) = by_id("session-archive") else { return };
    let current = select_value("session-archive");
    let html = LISTS.with(|l| {
        let l = l.borrow();
        let mut seen = BTreeSet::new();
        let mut h = String::from(r#"<option value="">all archives</option>"#);
        for s in &l.sessions {
            if seen.insert(s.archive.clone()) {
                let gone = if l.stored.contains(&s.archive) { "" } else { " (deleted)" };
                let _ = write!(
                    h,
                    r#"<option value="{}">{}{gone}</option>"#,
                    esc(&s.archive),
                    esc(s.archive_name.as_deref().unwrap_or(&s.archive))
                );
            }
        }
        h
    });
    sel.set_inner_html(&html);
    sel.unchecked_into::<web_sys::HtmlSelectElement>().set_value(&current);
}

/// Draws the home page's list under its filters.
fn draw() {
    let (archive, state) = (select_value("session-archive"), select_value("session-state"));
    let (html, shown, total) = LISTS.with(|l| {
        let l = l.borrow();
        let list: Vec<&SessionInfo> = l
            .sessions
            .iter()
            .filter(|s| archive.is_empty() || s.archive == archive)
            .filter(|s| match state.as_str() {
                "" => true,
                "active" => is_active(s),
                other => s.state.name() == other,
            })
            .collect();
        (rows_html(&list, &l.stored), list.len(), l.sessions.len())
    });
    let html = if total == 0 {
        r#"<p class="muted pad">No sessions yet: open an archive and start one on its Replay tab.</p>"#.to_string()
    } else if shown == 0 {
        r#"<p class="muted pad">No session matches these filters.</p>"#.to_string()
    } else {
        html
    };
    set_html("session-list", &html);
    let count = if shown == total {
        crate::model::count(total as u64, "session", "sessions")
    } else {
        format!("{shown} of {total} sessions")
    };
    set_html("session-count", &esc(&count));
}

/// An archive's own sessions, for its Replay tab (`GET /api/sessions?archive=ID`).
pub async fn load_for_archive(archive: String) {
    let list = api::get_json::<Vec<SessionInfo>>(&format!("/api/sessions?archive={archive}")).await;
    let html = match list {
        Ok(list) if list.is_empty() => r#"<p class="muted">No sessions of this archive yet.</p>"#.to_string(),
        Ok(list) => {
            let stored = BTreeSet::from([archive.clone()]);
            let refs: Vec<&SessionInfo> = list.iter().collect();
            format!(
                r#"<div class="table sessions"><div class="row head"><span>state</span><span>verdict</span><span>archive</span><span>kind</span><span>device</span><span>iterations</span><span>started</span><span>took</span><span>id</span></div><div class="tbody">{}</div></div>"#,
                rows_html(&refs, &stored)
            )
        }
        Err(e) => format!(r#"<p class="muted">The host's sessions are not available ({}).</p>"#, esc(&e)),
    };
    set_html("r-sessions", &html);
}

/// Asks, in the archive's own row, whether to delete it: the row's actions become the question
/// with a button that deletes and one that keeps it. The question stays until answered.
fn ask_delete(button: web_sys::Element, id: &str) {
    let Some(actions) = button.parent_element() else { return };
    let name = actions
        .parent_element()
        .and_then(|row| row.query_selector(".name").ok().flatten())
        .and_then(|n| n.text_content())
        .unwrap_or_default();
    let keep = actions.inner_html();
    let _ = actions.set_attribute("data-keep", &keep);
    actions.set_inner_html(&format!(
        r#"<span class="confirm" role="group" aria-label="delete {name}?">Delete? <button class="danger" data-archive-delete-confirm="{id}" title="delete {name} from this host (its sessions keep their results)">Delete</button><button data-archive-delete-keep>Keep</button></span>"#,
        name = esc(&name),
        id = esc(id),
    ));
    if let Ok(Some(b)) = actions.query_selector("[data-archive-delete-keep]") {
        let _ = b.unchecked_into::<web_sys::HtmlElement>().focus();
    }
}

/// Puts the row's own actions back after "Keep".
fn keep_archive(button: web_sys::Element) {
    let Some(actions) = button.closest(".actions").ok().flatten() else { return };
    if let Some(keep) = actions.get_attribute("data-keep") {
        actions.set_inner_html(&keep);
        let _ = actions.remove_attribute("data-keep");
    }
}

/// Deletes archive `id` (its confirm button was clicked).
fn delete_archive(button: web_sys::Element, id: String) {
    let _ = button.set_attribute("disabled", "");
    wasm_bindgen_futures::spawn_local(async move {
        match api::delete(&format!("/api/archives/{id}")).await {
            Ok(()) => {
                // A deleted archive that is open stays on screen only until the next navigation.
                with_app(|app| {
                    if app
                        .open
                        .as_ref()
                        .is_some_and(|o| matches!(&o.source, super::Source::Host { info } if info.id == id))
                    {
                        app.open = None;
                    }
                });
                super::set_status("archive deleted; its sessions keep their results");
                if by_id("archive-list").is_some() {
                    super::load_archive_list().await;
                    load().await;
                }
            }
            Err(e) => {
                let _ = button.remove_attribute("disabled");
                super::set_status(&e);
            }
        }
    });
}

pub fn wire() {
    let doc: web_sys::EventTarget = document().into();
    listen(&doc, "input", false, |ev| {
        let id = ev.target().and_then(|t| t.dyn_into::<web_sys::Element>().ok()).map(|e| e.id()).unwrap_or_default();
        if id == "session-archive" || id == "session-state" {
            draw();
        }
    });
    listen(&doc, "change", false, |ev| {
        let id = ev.target().and_then(|t| t.dyn_into::<web_sys::Element>().ok()).map(|e| e.id()).unwrap_or_default();
        if id == "session-archive" || id == "session-state" {
            draw();
        }
    });
    listen(&doc, "click", false, |ev| {
        if let Some(b) = dom::closest_with(&ev, "data-archive-delete") {
            ev.stop_propagation();
            if let Some(id) = b.get_attribute("data-archive-delete") {
                ask_delete(b, &id);
            }
        } else if let Some(b) = dom::closest_with(&ev, "data-archive-delete-confirm") {
            ev.stop_propagation();
            if let Some(id) = b.get_attribute("data-archive-delete-confirm") {
                delete_archive(b, id);
            }
        } else if let Some(b) = dom::closest_with(&ev, "data-archive-delete-keep") {
            ev.stop_propagation();
            keep_archive(b);
        }
    });
}
