//! The viewer's static files, and what `/` says when they are not built.

use std::path::{Path, PathBuf};

use axum::http::{StatusCode, Uri};
use axum::response::{Html, IntoResponse, Response};

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
but the web viewer was not found.</p>
<p>Build it with <code>cargo xtask wasm</code> in the repository, then start the host from the
repository root, or point it at the folder with <code>recap serve --web PATH/TO/web</code>.</p>
</body></html>
"#;

/// Answers every non-API path when there is no viewer: a page on how to build it at `/`, 404 elsewhere.
pub async fn not_built(uri: Uri) -> Response {
    if uri.path() == "/" || uri.path() == "/index.html" {
        return (StatusCode::OK, Html(NOT_BUILT)).into_response();
    }
    (StatusCode::NOT_FOUND, Html(NOT_BUILT)).into_response()
}
