//! Region contents as numpy `.npy` files: `GET /api/archives/{id}/regions/{name}` (the initial or
//! the expected state, straight from the archive) and `GET /api/sessions/{id}/regions/{name}` (what
//! a finished session kept: a replay's final state, both sides of a comparison where they part).
//!
//! `{name}` is a binding or region name (a trailing `.npy` may be added), or a region's number.
//!
//! Downloads are streamed: an archive of a few hundred bytes may declare a region of 2^62 bytes,
//! so a region's contents are decoded chunk by chunk on a blocking thread (a region without initial
//! contents sends zeros from one static buffer) and the host's memory does not grow with a region.

use std::io::Read;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use serde::Deserialize;
use shared::archive::{Archive, DType, RegionId};
use shared::npy;
use shared::protocol::{Event, SessionKind, SessionMessage, SessionState};

use super::archives::content_disposition;
use super::error::ApiError;
use super::AppState;
use crate::sessions::kept_file;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchiveRegionQuery {
    /// `initial` (the default) or `expected`.
    contents: Option<String>,
    /// The access token, when given in the query (checked before the handler runs).
    #[serde(rename = "token")]
    _token: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionRegionQuery {
    /// `a` or `b`: the side of a comparison.
    side: Option<String>,
    /// The access token, when given in the query (checked before the handler runs).
    #[serde(rename = "token")]
    _token: Option<String>,
}

/// The region `name` names: a binding or region name, with or without `.npy`, or a number.
fn region_in(archive: &Archive, name: &str) -> Result<RegionId, ApiError> {
    let bare = name.strip_suffix(".npy").unwrap_or(name);
    let unknown = match archive.region_named(name).or_else(|_| archive.region_named(bare)) {
        Ok(id) => return Ok(id),
        Err(unknown) => unknown,
    };
    match bare.parse::<RegionId>() {
        Ok(id) if (id as usize) < archive.region_count() => Ok(id),
        _ => Err(ApiError::not_found(unknown.to_string())),
    }
}

/// Bytes of one chunk of a streamed download.
const CHUNK: usize = 256 << 10;
/// Chunks decoded ahead of the socket.
const CHUNKS_AHEAD: usize = 4;
/// What a region without contents sends, chunk after chunk.
static ZEROS: [u8; CHUNK] = [0; CHUNK];

/// What a download's `.npy` file says about its data.
struct NpyHead {
    dtype: DType,
    shape: Vec<u64>,
    /// Bytes of data after the header.
    size: u64,
    file_name: String,
}

/// A `.npy` download: the header for `head`, then `data` (exactly `head.size` bytes).
fn npy_file(head: &NpyHead, data: Body) -> Response {
    let shape = npy::region_shape(head.dtype, head.size, &head.shape);
    let npy_header = npy::header(head.dtype, &shape);
    let len = npy_header.len() as u64 + head.size;
    let first = futures_util::stream::once(async move { Ok::<_, axum::Error>(Bytes::from(npy_header)) });
    let body = Body::from_stream(first.chain(data.into_data_stream()));
    let mut res = (StatusCode::OK, body).into_response();
    let headers = res.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    if let Ok(v) = HeaderValue::from_str(&content_disposition(&head.file_name)) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    res
}

/// `size` zero bytes, made as they are sent.
fn zeros(size: u64) -> Body {
    let chunks = futures_util::stream::unfold(size, |left| async move {
        let n = left.min(CHUNK as u64) as usize;
        (n > 0).then(|| (Ok::<_, std::io::Error>(Bytes::from_static(&ZEROS[..n])), left - n as u64))
    });
    Body::from_stream(chunks)
}

/// Sends what `read` gives, chunk by chunk, to a download's body until it ends, fails (the
/// download is then cut short: its `Content-Length` tells the client) or the client leaves.
/// Runs on a blocking thread.
fn pump(mut read: impl Read, tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>) {
    loop {
        let mut buf = vec![0u8; CHUNK];
        let sent = match read.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                buf.truncate(n);
                tx.blocking_send(Ok(Bytes::from(buf)))
            }
            Err(e) => {
                let _ = tx.blocking_send(Err(e));
                return;
            }
        };
        if sent.is_err() {
            return;
        }
    }
}

/// The body whose chunks [`pump`] sends through the other end.
fn channel_body() -> (Body, tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>) {
    let (tx, rx) = tokio::sync::mpsc::channel(CHUNKS_AHEAD);
    (Body::from_stream(receiver_stream(rx)), tx)
}

fn receiver_stream<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send + 'static {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// The region `name` of the archive in `map`: what its `.npy` header says, and a reader of its
/// initial or `expected` contents (`None`: a region without initial contents, all zeros).
fn archive_region_in<'m>(
    map: &'m [u8],
    id: &str,
    name: &str,
    expected: bool,
) -> Result<(NpyHead, Option<Box<dyn Read + 'm>>), ApiError> {
    let archive = Archive::open(map).map_err(|e| ApiError::internal(format!("archive {id}: {e}")))?;
    let region = archive.region(region_in(&archive, name)?);
    let blob = match (expected, region.expected, region.initial) {
        (true, Some(blob), _) | (false, _, Some(blob)) => Some(blob),
        (true, None, _) => {
            return Err(ApiError::not_found(format!("region {:?} of archive {id} has no expected state", region.name)))
        }
        // A region without initial data starts zeroed, as every replay starts it.
        (false, _, None) => None,
    };
    let suffix = if expected { "expected" } else { "initial" };
    let file_name = format!("{}.{suffix}.npy", npy::file_stem(region.name));
    let head = NpyHead { dtype: region.dtype, shape: region.shape.clone(), size: region.size, file_name };
    Ok((head, blob.map(|b| b.reader())))
}

/// A region as a session's log describes it: enough to name and type its kept bytes once the
/// archive itself is gone.
struct LoggedRegion {
    id: RegionId,
    name: String,
    dtype: DType,
    shape: Vec<u64>,
}

/// The region `name` names (a name, with or without `.npy`, or a number) among those a session's
/// log summarised (a replay's `region` messages, a comparison's partings).
fn logged_region(events: &[Event], name: &str) -> Option<LoggedRegion> {
    let bare = name.strip_suffix(".npy").unwrap_or(name);
    events
        .iter()
        .filter_map(|e| match &e.message {
            SessionMessage::Region { summary } => Some((summary.region, &summary.name, &summary.dtype, &summary.shape)),
            SessionMessage::Parted { parting } => Some((parting.region, &parting.name, &parting.dtype, &parting.shape)),
            _ => None,
        })
        .find(|(id, n, _, _)| n.as_str() == name || n.as_str() == bare || bare.parse::<u32>().ok() == Some(*id))
        .and_then(|(id, n, dtype, shape)| {
            Some(LoggedRegion { id, name: n.clone(), dtype: DType::from_name(dtype)?, shape: shape.clone() })
        })
}

pub async fn archive_region(
    State(app): State<AppState>,
    Path((id, name)): Path<(String, String)>,
    Query(query): Query<ArchiveRegionQuery>,
) -> Result<Response, ApiError> {
    let expected = match query.contents.as_deref() {
        None | Some("initial") => false,
        Some("expected") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!("contents must be initial or expected, got {other:?}")))
        }
    };
    let store = app.store.clone();
    let (body, tx) = channel_body();
    // The header's facts, and whether the region has stored contents (else it is zeros).
    let (head_tx, head_rx) = tokio::sync::oneshot::channel::<Result<(NpyHead, bool), ApiError>>();
    // One blocking thread finds the region, answers with what the header needs, then decodes the
    // contents into the body while the archive stays mapped.
    tokio::task::spawn_blocking(move || {
        let map = match store.index.archive(&id) {
            Ok(Some(info)) => store.map(&info).map_err(ApiError::from),
            Ok(None) => Err(ApiError::not_found(format!("no archive with id {id}"))),
            Err(e) => Err(e.into()),
        };
        let map = match map {
            Ok(map) => map,
            Err(e) => {
                let _ = head_tx.send(Err(e));
                return;
            }
        };
        let found = archive_region_in(&map, &id, &name, expected);
        match found {
            Ok((head, reader)) => {
                if head_tx.send(Ok((head, reader.is_some()))).is_ok() {
                    if let Some(reader) = reader {
                        pump(reader, tx);
                    }
                }
            }
            Err(e) => {
                let _ = head_tx.send(Err(e));
            }
        }
    });
    let (head, stored) = head_rx.await.map_err(|_| ApiError::internal("reading a region failed"))??;
    let data = if stored { body } else { zeros(head.size) };
    Ok(npy_file(&head, data))
}

pub async fn session_region(
    State(app): State<AppState>,
    Path((id, name)): Path<(String, String)>,
    Query(query): Query<SessionRegionQuery>,
) -> Result<Response, ApiError> {
    let info = {
        let sessions = app.sessions.clone();
        let id = id.clone();
        tokio::task::spawn_blocking(move || sessions.info(&id)).await??
    };
    if info.state != SessionState::Finished {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_finished",
            format!("session {id} is {}: region contents are kept once it finishes", info.state.name()),
        ));
    }
    let side = match (info.kind, query.side.as_deref()) {
        (SessionKind::Replay, None) => None,
        (SessionKind::Compare, Some(side @ ("a" | "b"))) => Some(side.to_string()),
        (SessionKind::Replay, Some(_)) => return Err(ApiError::bad_request("side belongs to compare sessions")),
        (SessionKind::Compare, _) => {
            return Err(ApiError::bad_request("a compare session keeps two sides: add ?side=a or ?side=b"))
        }
    };
    let store = app.store.clone();
    tokio::task::spawn_blocking(move || {
        // Named and typed by the archive while it is stored, else by what the session's log says.
        let region = match store.index.archive(&info.archive)? {
            Some(archive_info) => {
                let map = store.map(&archive_info)?;
                let archive =
                    Archive::open(&map).map_err(|e| ApiError::internal(format!("archive {}: {e}", info.archive)))?;
                let r = archive.region(region_in(&archive, &name)?);
                LoggedRegion { id: r.id, name: r.name.to_string(), dtype: r.dtype, shape: r.shape.clone() }
            }
            None => logged_region(&store.index.events(&id)?, &name).ok_or_else(|| {
                ApiError::not_found(format!(
                    "session {id} kept no region named {name:?} (its archive {} was deleted; the regions it kept \
                     are those its log summarises)",
                    info.archive
                ))
            })?,
        };
        let file = kept_file(region.id, side.as_deref());
        let path = store.session_dir(&id).join(&file);
        // Here (streamed from the file), else (a session a cluster's worker ran) in the blob store.
        let local = std::fs::File::open(&path).and_then(|f| Ok((f.metadata()?.len(), f)));
        let kept = match local {
            Ok((size, f)) => {
                Some((size, Body::from_stream(tokio_util::io::ReaderStream::new(tokio::fs::File::from_std(f)))))
            }
            Err(_) => store.blobs.kept(&id, &file)?.map(|bytes| (bytes.len() as u64, Body::from(bytes))),
        };
        let (size, data) = kept.ok_or_else(|| {
            let what = match &side {
                Some(side) => format!(
                    "side {side} of region {:?} (a comparison keeps the regions where its sides part)",
                    region.name
                ),
                None => format!(
                    "region {:?} (a replay keeps its output regions, {} MiB at most)",
                    region.name,
                    crate::sessions::KEEP_BYTES >> 20
                ),
            };
            ApiError::not_found(format!("session {id} did not keep {what}"))
        })?;
        let stem = match &side {
            Some(side) => format!("{}.{side}.npy", npy::file_stem(&region.name)),
            None => format!("{}.npy", npy::file_stem(&region.name)),
        };
        Ok(npy_file(&NpyHead { dtype: region.dtype, shape: region.shape, size, file_name: stem }, data))
    })
    .await?
}
