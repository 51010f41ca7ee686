//! Talking to the host: JSON over fetch, uploads over XMLHttpRequest (the one browser API that
//! reports upload progress), and the access token carried along when the page's URL has one.

use serde::de::DeserializeOwned;
use shared::protocol::ErrorBody;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::{Request, RequestInit, Response};

use super::dom::window;

/// The access token from the page's own URL (`?token=`), passed on to every API call.
pub fn token() -> Option<String> {
    let search = window().location().search().ok()?;
    let params = web_sys::UrlSearchParams::new_with_str(&search).ok()?;
    params.get("token").filter(|t| !t.is_empty())
}

/// `path` with the token appended when there is one.
pub fn url(path: &str) -> String {
    match token() {
        Some(t) => format!(
            "{path}{}token={}",
            if path.contains('?') { '&' } else { '?' },
            String::from(js_sys::encode_uri_component(&t))
        ),
        None => path.to_string(),
    }
}

/// The message of an error answer: the host's JSON error when it sent one, else the status line.
async fn error_of(resp: &Response) -> String {
    let status = format!("{} {}", resp.status(), resp.status_text());
    let text = match resp.text() {
        Ok(p) => JsFuture::from(p).await.ok().and_then(|t| t.as_string()).unwrap_or_default(),
        Err(_) => String::new(),
    };
    match serde_json::from_str::<ErrorBody>(&text) {
        Ok(b) => format!("{} ({status})", b.error.message),
        Err(_) if text.trim().is_empty() => status,
        Err(_) => format!("{status}: {}", text.chars().take(200).collect::<String>()),
    }
}

async fn send(method: &str, path: &str, json: Option<String>) -> Result<Response, String> {
    let init = RequestInit::new();
    init.set_method(method);
    if let Some(body) = &json {
        init.set_body(&JsValue::from_str(body));
        let headers = web_sys::Headers::new().map_err(|e| format!("{e:?}"))?;
        let _ = headers.set("content-type", "application/json");
        init.set_headers(&headers);
    }
    let req = Request::new_with_str_and_init(&url(path), &init).map_err(|e| format!("{method} {path}: {e:?}"))?;
    let resp = JsFuture::from(window().fetch_with_request(&req))
        .await
        .map_err(|_| format!("{method} {path}: the host did not answer (is `recap serve` running?)"))?;
    let resp: Response = resp.unchecked_into();
    if !resp.ok() {
        return Err(format!("{method} {path}: {}", error_of(&resp).await));
    }
    Ok(resp)
}

pub async fn get_json<T: DeserializeOwned>(path: &str) -> Result<T, String> {
    let resp = send("GET", path, None).await?;
    let text = JsFuture::from(resp.text().map_err(|e| format!("{e:?}"))?).await.map_err(|e| format!("{e:?}"))?;
    serde_json::from_str(&text.as_string().unwrap_or_default())
        .map_err(|e| format!("GET {path}: unexpected answer: {e}"))
}

pub async fn post_json<T: DeserializeOwned>(path: &str, body: &impl serde::Serialize) -> Result<T, String> {
    let body = serde_json::to_string(body).map_err(|e| e.to_string())?;
    let resp = send("POST", path, Some(body)).await?;
    let text = JsFuture::from(resp.text().map_err(|e| format!("{e:?}"))?).await.map_err(|e| format!("{e:?}"))?;
    serde_json::from_str(&text.as_string().unwrap_or_default())
        .map_err(|e| format!("POST {path}: unexpected answer: {e}"))
}

/// `DELETE path`; the host answers 204 with no body.
pub async fn delete(path: &str) -> Result<(), String> {
    send("DELETE", path, None).await.map(|_| ())
}

pub async fn get_bytes(path: &str) -> Result<Vec<u8>, String> {
    let resp = send("GET", path, None).await?;
    let buf = JsFuture::from(resp.array_buffer().map_err(|e| format!("{e:?}"))?).await.map_err(|e| format!("{e:?}"))?;
    Ok(js_sys::Uint8Array::new(&buf).to_vec())
}

/// The content type an upload of `name` is sent with: an NVIDIA Warp capture packed as a zip or tar
/// is converted by the host; anything else is an archive.
pub fn upload_content_type(name: &str) -> &'static str {
    let name = name.to_ascii_lowercase();
    if name.ends_with(".zip") {
        "application/zip"
    } else if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
        "application/gzip"
    } else if name.ends_with(".tar") {
        "application/x-tar"
    } else {
        "application/octet-stream"
    }
}

/// Uploads `file` to `POST /api/archives?name=`, calling `progress(sent, total)` as bytes leave,
/// and `done` with the stored archive or the host's error message.
pub fn upload(
    file: &web_sys::File,
    progress: impl Fn(f64, f64) + 'static,
    done: impl FnOnce(Result<shared::protocol::ArchiveInfo, String>) + 'static,
) -> Result<(), String> {
    let xhr = web_sys::XmlHttpRequest::new().map_err(|e| format!("{e:?}"))?;
    let content_type = upload_content_type(&file.name());
    // A converted capture is named by the host after its .wrp file.
    let path = match content_type {
        "application/octet-stream" => {
            format!("/api/archives?name={}", String::from(js_sys::encode_uri_component(&file.name())))
        }
        _ => "/api/archives".to_string(),
    };
    xhr.open("POST", &url(&path)).map_err(|e| format!("{e:?}"))?;
    let _ = xhr.set_request_header("content-type", content_type);
    let on_progress = Closure::<dyn Fn(web_sys::ProgressEvent)>::new(move |ev: web_sys::ProgressEvent| {
        if ev.length_computable() {
            progress(ev.loaded(), ev.total());
        }
    });
    if let Ok(up) = xhr.upload() {
        up.set_onprogress(Some(on_progress.as_ref().unchecked_ref()));
    }
    let done = std::cell::RefCell::new(Some(done));
    let xhr2 = xhr.clone();
    let on_end = Closure::<dyn Fn(web_sys::Event)>::new(move |ev: web_sys::Event| {
        let Some(done) = done.borrow_mut().take() else { return };
        let status = xhr2.status().unwrap_or(0);
        let text = xhr2.response_text().ok().flatten().unwrap_or_default();
        if ev.type_() != "load" || status == 0 {
            done(Err("the upload did not reach the host (connection closed)".into()));
        } else if (200..300).contains(&status) {
            done(serde_json::from_str(&text).map_err(|e| format!("unexpected answer to the upload: {e}")));
        } else {
            let msg = serde_json::from_str::<ErrorBody>(&text).map(|b| b.error.message).unwrap_or(text);
            done(Err(format!("{msg} ({status})")));
        }
    });
    xhr.set_onload(Some(on_end.as_ref().unchecked_ref()));
    xhr.set_onerror(Some(on_end.as_ref().unchecked_ref()));
    xhr.set_onabort(Some(on_end.as_ref().unchecked_ref()));
    xhr.send_with_opt_blob(Some(&**file)).map_err(|e| format!("{e:?}"))?;
    // The request owns its handlers for its whole life; they are small and fire once.
    on_progress.forget();
    on_end.forget();
    Ok(())
}
