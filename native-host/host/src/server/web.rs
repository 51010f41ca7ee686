//! The viewer's static files (a folder, or the copy built into this binary), and what `/` says
//! when there are none.

use std::path::{Path, PathBuf};

use axum::http::{header, StatusCode, Uri};
use axum::response::{Html, IntoResponse, Response};

include!(concat!(env!("OUT_DIR"), "/embedded_web.rs"));

/// Where the viewer's files come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Viewer {
    /// A folder: `--web`, or `web/` found beside the working directory or the executable.
    Dir(PathBuf),
    /// The copy built into this binary (`build.rs`).
    Embedded,
    /// None: `/` says how to build it.
    Missing,
}

impl Viewer {
    /// `--web` if given, else the viewer built into this binary, else a `web/` folder found as
    /// [`find_web_dir`] looks.
    pub fn find(given: Option<&Path>) -> Viewer {
        match (given, EMBEDDED.is_empty()) {
            (Some(dir), _) => Viewer::Dir(dir.to_path_buf()),
            (None, false) => Viewer::Embedded,
            (None, true) => find_web_dir(None).map_or(Viewer::Missing, Viewer::Dir),
        }
    }
}

/// A file of the built-in viewer; the page itself for `/` and its client-side routes.
pub async fn embedded(uri: Uri) -> Response {
    let path = uri.path();
    let page = path == "/" || path.starts_with("/archives/") || path.starts_with("/sessions/");
    let wanted = if page { "/index.html" } else { path };
    let Some((name, bytes)) = EMBEDDED.iter().find(|(name, _)| *name == wanted) else {
        return (StatusCode::NOT_FOUND, Html("no such file")).into_response();
    };
    let kind = match name.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("wasm") => "application/wasm",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    };
    ([(header::CONTENT_TYPE, kind)], *bytes).into_response()
}

/// `--web` if given, else `web/` under the current folder, else `web/` at the root of the
/// repository the executable was built in (`target/<profile>/recap` → two levels up).
pub fn find_web_dir(given: Option<&Path>) -> Option<PathBuf> {
    if let Some(dir) = given {
        return Some(dir.to_path_buf());
    }
    let cwd = PathBuf::from("web");
    if cwd.join("index.html").is_file() {
        return Some(cwd);
    }
    let exe = std::env::current_exe().ok()?;
    exe.ancestors().skip(1).take(4).map(|d| d.join("web")).find(|d| d.join("index.html").is_file())
}

const NOT_BUILT: &str = r#"<!doctype html>
<html><head><meta charset="utf-8"><title>recap host</title></head>
<body style="font-family: sans-serif; max-width: 40em; margin: 3em auto">
<h1>recap host</h1>
<p>The API is up (<a href="/api/archives">/api/archives</a>, <a href="/api/devices">/api/devices</a>),
but this binary was built without the web viewer and no <code>web/</code> folder was found.</p>
<p>Build it with <code>cargo xtask wasm</code> in the repository, then build recap again (the
release binary carries the viewer), or point the host at the folder with
<code>recap serve --web PATH/TO/web</code>.</p>
</body></html>
"#;

/// Answers every non-API path when there is no viewer: a page on how to build it at `/`, 404 elsewhere.
pub async fn not_built(uri: Uri) -> Response {
    if uri.path() == "/" || uri.path() == "/index.html" {
        return (StatusCode::OK, Html(NOT_BUILT)).into_response();
    }
    (StatusCode::NOT_FOUND, Html(NOT_BUILT)).into_response()
}
