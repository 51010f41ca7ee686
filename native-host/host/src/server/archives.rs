//! `/api/archives`: upload (streamed to disk), list, get, download with ranges, delete.

use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use serde::Deserialize;
use shared::protocol::ArchiveInfo;
use tower::ServiceExt;

use super::access::require_content_type;
use super::error::ApiError;
use super::AppState;
use crate::store::{Download, Incoming, ObjectRead};

#[derive(Deserialize)]
pub struct UploadQuery {
    name: Option<String>,
}

/// The header that may name an upload when the query does not (`?name=` wins).
const NAME_HEADER: &str = "x-recap-name";

/// Chunks in flight between the socket and the writer thread: bounds the memory an upload holds.
const CHUNKS_IN_FLIGHT: usize = 16;

fn check_name(name: Option<String>) -> Result<String, ApiError> {
    let name = name.unwrap_or_else(|| "archive.recap".into());
    if name.is_empty() || name.len() > 255 || name.chars().any(char::is_control) {
        return Err(ApiError::bad_request("`name` must be 1 to 255 characters without control characters"));
    }
    Ok(name)
}

/// What a refused upload may still send that the host reads and discards, so that a client still
/// sending its body reads the answer instead of a connection reset (closing a socket with unread
/// bytes makes the kernel answer with a reset, which can destroy the answer already sent).
const DRAIN_BYTES: u64 = 64 << 20;
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads and discards the rest of a refused upload in the background (bounded by bytes and time).
fn drain(mut body: axum::body::BodyDataStream) {
    tokio::spawn(async move {
        let mut left = DRAIN_BYTES;
        let _ = tokio::time::timeout(DRAIN_TIME, async {
            while let Some(Ok(chunk)) = body.next().await {
                left = left.saturating_sub(chunk.len() as u64);
                if left == 0 {
                    break;
                }
            }
        })
        .await;
    });
}

/// The 413 answer; the connection closes after it, as the refused body is not read to its end.
fn too_large(limit: u64) -> Response {
    let mut res = ApiError::from(crate::store::StoreError::TooLarge { limit }).into_response();
    res.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    res
}

/// The request back, or the 413 answer when its `Content-Length` already says it is over `limit`
/// (what it still sends is drained).
// The error is the answer itself, sent at once; boxing it would only add a step.
#[allow(clippy::result_large_err)]
fn refuse_declared_over(req: Request, limit: u64) -> Result<Request, Response> {
    let declared =
        req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        drain(req.into_body().into_data_stream());
        return Err(too_large(limit));
    }
    Ok(req)
}

pub async fn upload(
    State(app): State<AppState>,
    Query(query): Query<UploadQuery>,
    req: Request,
) -> Result<Response, ApiError> {
    let started = std::time::Instant::now();
    let bundle = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(recap::import_wrp::BundleKind::from_content_type);
    if let Some(kind) = bundle {
        return upload_bundle(app, query, req, kind).await;
    }
    let what =
        "POST /api/archives (or, for an NVIDIA Warp capture, application/zip, application/x-tar or application/gzip)";
    if let Err(mut e) = require_content_type(req.headers(), "application/octet-stream", what) {
        // `curl --data-binary @FILE` sends a form's content type unless told otherwise; forms stay
        // refused (a foreign page may send one without asking), so the answer says how to upload.
        e.message.push_str(
            "; with curl: curl -H 'Content-Type: application/octet-stream' --data-binary @FILE 'HOST/api/archives?name=NAME'",
        );
        drain(req.into_body().into_data_stream());
        return Err(e);
    }
    // The name from the query, else from the `X-Recap-Name` header (for clients that keep URLs fixed).
    let header_name = match req.headers().get(NAME_HEADER).map(|v| v.to_str()) {
        Some(Ok(v)) => Some(v.to_string()),
        Some(Err(_)) => return Err(ApiError::bad_request(format!("the {NAME_HEADER} header is not visible ASCII"))),
        None => None,
    };
    let name = check_name(query.name.or(header_name))?;
    let limit = app.config.max_upload;
    let req = match refuse_declared_over(req, limit) {
        Ok(req) => req,
        Err(refused) => return Ok(refused),
    };
    let _slot = app.config.uploads.acquire().await.map_err(|_| ApiError::internal("the host is shutting down"))?;
    let _done = super::BodyDone;
    let store = app.store.clone();
    let incoming = tokio::task::spawn_blocking(move || store.begin(limit)).await??;

    // The socket is read here while a blocking thread hashes and writes, so disk and network overlap.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(CHUNKS_IN_FLIGHT);
    let writer = tokio::task::spawn_blocking(move || -> Result<Incoming, crate::store::StoreError> {
        let mut incoming = incoming;
        while let Some(chunk) = rx.blocking_recv() {
            incoming.write(chunk)?;
        }
        Ok(incoming)
    });
    let mut body = req.into_body().into_data_stream();
    let mut received: u64 = 0;
    let mut read_error = None;
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(chunk) => {
                received += chunk.len() as u64;
                if received > limit || tx.send(chunk).await.is_err() {
                    break;
                }
            }
            Err(e) => {
                read_error = Some(e);
                break;
            }
        }
    }
    drop(tx);
    let incoming = writer.await??;
    if received > limit {
        drain(body);
        return Ok(too_large(limit));
    }
    if let Some(e) = read_error {
        return Err(ApiError::bad_request(format!("reading the upload failed after {received} bytes: {e}")));
    }
    let store = app.store.clone();
    let given = name.clone();
    let mut ingested = tokio::task::spawn_blocking(move || store.finish(incoming, &name)).await??;
    let status = if ingested.created { StatusCode::CREATED } else { StatusCode::OK };
    if !ingested.created {
        // The same bytes are stored once, under the name they came with first; another name joins
        // that archive as an alias. Say so, rather than answer with another name than the one given.
        let stored = &ingested.archive.name;
        ingested.archive.note = Some(if *stored == given {
            format!("already stored as {stored}: the same bytes were uploaded before")
        } else if ingested.archive.alias_added.is_some() {
            format!("already stored as {stored}: the same bytes were uploaded before; {given} is kept as another name of it")
        } else {
            format!("already stored as {stored}: the same bytes were uploaded before, also as {given}")
        });
    }
    if ingested.created {
        let took_ms = started.elapsed().as_millis() as u64;
        tracing::info!(id = ingested.archive.id, size = ingested.archive.size, took_ms, "archive stored");
    }
    Ok((status, Json(ingested.archive)).into_response())
}

/// An NVIDIA Warp capture packed as a zip or tar (`import_wrp::bundle` says what it holds): stored
/// to a scratch folder, converted with `recap import-wrp`'s importer, and the archive stored as an
/// upload would be; the answer's `note` says what was converted.
async fn upload_bundle(
    app: AppState,
    query: UploadQuery,
    req: Request,
    kind: recap::import_wrp::BundleKind,
) -> Result<Response, ApiError> {
    let limit = app.config.max_upload;
    let req = match refuse_declared_over(req, limit) {
        Ok(req) => req,
        Err(refused) => return Ok(refused),
    };
    let _slot = app.config.uploads.acquire().await.map_err(|_| ApiError::internal("the host is shutting down"))?;
    let _done = super::BodyDone;
    let store = app.store.clone();
    let work = tokio::task::spawn_blocking(move || store.scratch()).await??;
    let bundle_path = work.path().join("upload");
    let mut file = tokio::fs::File::create(&bundle_path)
        .await
        .map_err(|e| ApiError::internal(format!("creating {}: {e}", bundle_path.display())))?;
    let mut body = req.into_body().into_data_stream();
    let mut received = 0u64;
    while let Some(chunk) = body.next().await {
        let chunk = chunk
            .map_err(|e| ApiError::bad_request(format!("reading the upload failed after {received} bytes: {e}")))?;
        received += chunk.len() as u64;
        if received > limit {
            drain(body);
            return Ok(too_large(limit));
        }
        tokio::io::AsyncWriteExt::write_all(&mut file, &chunk)
            .await
            .map_err(|e| ApiError::internal(format!("writing {}: {e}", bundle_path.display())))?;
    }
    // A tokio file finishes its last write in the background unless flushed.
    tokio::io::AsyncWriteExt::flush(&mut file)
        .await
        .map_err(|e| ApiError::internal(format!("writing {}: {e}", bundle_path.display())))?;
    drop(file);
    let store = app.store.clone();
    let replay_limits = app.config.replay_limits;
    let ingested = tokio::task::spawn_blocking(move || {
        let out = work.path().join("converted.recap");
        let (summary, wrp_name) =
            recap::import_wrp::import_bundle(&bundle_path, kind, work.path(), &out, limit, replay_limits)
            .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_capture", e.to_string()))?;
        let name = query.name.clone().unwrap_or_else(|| format!("{}.recap", wrp_name.strip_suffix(".wrp").unwrap_or(&wrp_name)));
        let name = check_name(Some(name))?;
        let mut ingested = store.import_file(&out, Some(&name), limit)?;
        let ptx: Vec<String> = summary.modules.iter().map(|(m, from)| format!("{m}: {from}")).collect();
        ingested.archive.note = Some(format!(
            "converted from the Warp capture {wrp_name} ({}): {} launch(es), {} op(s), {} region(s), {} expected state(s); PTX of {}",
            summary.producer,
            summary.launches,
            summary.ops,
            summary.regions,
            summary.expected,
            ptx.join("; ")
        ));
        Ok::<_, ApiError>(ingested)
    })
    .await??;
    tracing::info!(id = ingested.archive.id, "Warp capture converted and stored");
    let status = if ingested.created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(ingested.archive)).into_response())
}

pub async fn list(State(app): State<AppState>) -> Result<Json<Vec<ArchiveInfo>>, ApiError> {
    let store = app.store.clone();
    Ok(Json(tokio::task::spawn_blocking(move || store.index.archives()).await??))
}

async fn find(app: &AppState, id: String) -> Result<ArchiveInfo, ApiError> {
    let store = app.store.clone();
    let found = tokio::task::spawn_blocking(move || store.index.archive(&id).map(|a| (id, a))).await??;
    found.1.ok_or_else(|| ApiError::not_found(format!("no archive with id {}", found.0)))
}

pub async fn get(State(app): State<AppState>, Path(id): Path<String>) -> Result<Json<ArchiveInfo>, ApiError> {
    Ok(Json(find(&app, id).await?))
}

pub async fn raw(State(app): State<AppState>, Path(id): Path<String>, req: Request) -> Result<Response, ApiError> {
    let archive = find(&app, id).await?;
    // The hash names the bytes: a copy the client holds under it is current.
    let etag = format!("\"{}\"", archive.hash);
    if let Some(given) = req.headers().get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) {
        if given.split(',').map(|t| t.trim().trim_start_matches("W/")).any(|t| t == etag || t == "*") {
            let mut res = StatusCode::NOT_MODIFIED.into_response();
            if let Ok(v) = HeaderValue::from_str(&etag) {
                res.headers_mut().insert(header::ETAG, v);
            }
            return Ok(res);
        }
    }
    let store = app.store.clone();
    let hash = archive.hash.clone();
    let source = tokio::task::spawn_blocking(move || store.blobs.download(&hash)).await??;
    let mut res = match source {
        // ServeFile answers Range, If-Range and HEAD the way HTTP wants.
        Download::File(path) => tower_http::services::ServeFile::new(path)
            .oneshot(req)
            .await
            .map_err(|e| ApiError::internal(format!("reading archive {}: {e}", archive.id)))?
            .map(Body::new),
        Download::Object(object) => {
            let range = req.headers().get(header::RANGE).and_then(|v| v.to_str().ok()).map(str::to_string);
            let head = req.method() == axum::http::Method::HEAD;
            object_response(object.as_ref(), &archive, range.as_deref(), head).await?
        }
    };
    if let Ok(v) = HeaderValue::from_str(&content_disposition(&archive.name)) {
        res.headers_mut().insert(header::CONTENT_DISPOSITION, v);
    }
    res.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        res.headers_mut().insert(header::ETAG, v);
    }
    Ok(res.into_response())
}

/// A download read from a remote store: the whole object, or the one byte range asked for
/// (`Range: bytes=A-B`, `bytes=A-`, `bytes=-N`); several ranges or an unreadable header get the
/// whole object, a range past the end `416`.
async fn object_response(
    object: &dyn ObjectRead,
    archive: &ArchiveInfo,
    range: Option<&str>,
    head: bool,
) -> Result<Response, ApiError> {
    let size = archive.size;
    let wanted = range.map(|v| parse_range(v, size));
    let (status, range) = match wanted {
        Some(Some(Ok(range))) => (StatusCode::PARTIAL_CONTENT, range),
        Some(Some(Err(()))) => {
            let mut res = StatusCode::RANGE_NOT_SATISFIABLE.into_response();
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                res.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            return Ok(res);
        }
        _ => (StatusCode::OK, 0..size),
    };
    let len = range.end - range.start;
    let body = if head || len == 0 {
        Body::empty()
    } else {
        let stream = object.read(range.clone()).await.map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                format!("reading archive {} from the blob store: {e}", archive.id),
            )
        })?;
        Body::from_stream(stream)
    };
    let mut res = (status, body).into_response();
    let headers = res.headers_mut();
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    if status == StatusCode::PARTIAL_CONTENT {
        if let Ok(v) = HeaderValue::from_str(&format!("bytes {}-{}/{size}", range.start, range.end - 1)) {
            headers.insert(header::CONTENT_RANGE, v);
        }
    }
    Ok(res)
}

/// One byte range of a `Range` header over `size` bytes: `None` for a header this does not read
/// (several ranges, another unit), `Err` for a range wholly past the end.
fn parse_range(header: &str, size: u64) -> Option<Result<std::ops::Range<u64>, ()>> {
    let spec = header.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (first, last) = spec.split_once('-')?;
    let (first, last) = (first.trim(), last.trim());
    if first.is_empty() {
        let n: u64 = last.parse().ok()?;
        if n == 0 || size == 0 {
            return Some(Err(()));
        }
        return Some(Ok(size.saturating_sub(n)..size));
    }
    let start: u64 = first.parse().ok()?;
    let end = if last.is_empty() { size } else { last.parse::<u64>().ok()?.saturating_add(1).min(size) };
    if start >= size || start >= end {
        return Some(Err(()));
    }
    Some(Ok(start..end))
}

/// `attachment` with the name twice (RFC 6266): `filename` a plain-ASCII fallback without path
/// separators or quotes, `filename*` the exact name in UTF-8, percent-encoded.
pub fn content_disposition(name: &str) -> String {
    let base =
        name.rsplit(['/', '\\']).next().filter(|b| !b.is_empty() && *b != "." && *b != "..").unwrap_or("archive.recap");
    let fallback: String = base
        .chars()
        .map(|c| if c.is_ascii_graphic() && !matches!(c, '"' | '\\' | '%' | ';') { c } else { '_' })
        .collect();
    let mut encoded = String::new();
    for b in base.bytes() {
        if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
            encoded.push(b as char);
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    format!("attachment; filename=\"{fallback}\"; filename*=UTF-8''{encoded}")
}

pub async fn delete(State(app): State<AppState>, Path(id): Path<String>) -> Result<StatusCode, ApiError> {
    let store = app.store.clone();
    let removed = tokio::task::spawn_blocking(move || store.delete(&id).map(|a| (id, a))).await??;
    match removed.1 {
        Some(a) => {
            tracing::info!(id = a.id, "archive deleted");
            Ok(StatusCode::NO_CONTENT)
        }
        None => Err(ApiError::not_found(format!("no archive with id {}", removed.0))),
    }
}

#[cfg(test)]
mod tests {
    use super::{content_disposition, parse_range};

    #[test]
    fn byte_ranges_of_remote_downloads() {
        assert_eq!(parse_range("bytes=0-9", 100), Some(Ok(0..10)));
        assert_eq!(parse_range("bytes=90-", 100), Some(Ok(90..100)));
        assert_eq!(parse_range("bytes=-5", 100), Some(Ok(95..100)));
        assert_eq!(parse_range("bytes=50-500", 100), Some(Ok(50..100)));
        assert_eq!(parse_range("bytes=100-", 100), Some(Err(())));
        assert_eq!(parse_range("bytes=0-1,5-6", 100), None);
        assert_eq!(parse_range("items=0-1", 100), None);
    }

    #[test]
    fn download_names_are_sanitised_and_encoded() {
        assert_eq!(
            content_disposition("saxpy.recap"),
            "attachment; filename=\"saxpy.recap\"; filename*=UTF-8''saxpy.recap"
        );
        assert_eq!(
            content_disposition("../../etc/pass\"wd;x.recap"),
            "attachment; filename=\"pass_wd_x.recap\"; filename*=UTF-8''pass%22wd%3Bx.recap"
        );
        assert_eq!(
            content_disposition("Schrödinger 1.recap"),
            "attachment; filename=\"Schr_dinger_1.recap\"; filename*=UTF-8''Schr%C3%B6dinger%201.recap"
        );
        assert_eq!(content_disposition(".."), "attachment; filename=\"archive.recap\"; filename*=UTF-8''archive.recap");
    }
}
