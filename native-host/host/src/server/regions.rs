//! Region contents as numpy `.npy` files: `GET /api/archives/{id}/regions/{name}` (the initial or
//! the expected state, straight from the archive) and `GET /api/sessions/{id}/regions/{name}` (what
//! a finished session kept: a replay's final state, both sides of a comparison where they part).
//!
//! `{name}` is a binding or region name (a trailing `.npy` may be added), or a region's number.

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
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

/// A `.npy` download of `bytes` as a region of `dtype` and shape hint `shape` holds them.
fn npy_file(dtype: DType, shape: &[u64], file_name: &str, bytes: &[u8]) -> Response {
    let shape = npy::region_shape(dtype, bytes.len() as u64, shape);
    let mut body = npy::header(dtype, &shape);
    body.extend_from_slice(bytes);
    let mut res = (StatusCode::OK, Body::from(body)).into_response();
    res.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    if let Ok(v) = HeaderValue::from_str(&content_disposition(file_name)) {
        res.headers_mut().insert(header::CONTENT_DISPOSITION, v);
    }
    res
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
    tokio::task::spawn_blocking(move || {
        let info = store.index.archive(&id)?.ok_or_else(|| ApiError::not_found(format!("no archive with id {id}")))?;
        let map = store.map(&info)?;
        let archive = Archive::open(&map).map_err(|e| ApiError::internal(format!("archive {id}: {e}")))?;
        let region = archive.region(region_in(&archive, &name)?);
        let bytes = match (expected, region.expected, region.initial) {
            (true, Some(blob), _) | (false, _, Some(blob)) => {
                blob.decode().map_err(|e| ApiError::internal(format!("archive {id}, region {:?}: {e}", region.name)))?
            }
            (true, None, _) => {
                return Err(ApiError::not_found(format!(
                    "region {:?} of archive {id} has no expected state",
                    region.name
                )))
            }
            // A region without initial data starts zeroed, as every replay starts it.
            (false, _, None) => vec![0; region.size as usize],
        };
        let suffix = if expected { "expected" } else { "initial" };
        let file = format!("{}.{suffix}.npy", npy::file_stem(region.name));
        Ok(npy_file(region.dtype, &region.shape, &file, &bytes))
    })
    .await?
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
        // Here, else (a session a cluster's worker ran) in the blob store.
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => Some(bytes),
            Err(_) => store.blobs.kept(&id, &file)?,
        };
        let bytes = bytes.ok_or_else(|| {
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
        Ok(npy_file(region.dtype, &region.shape, &stem, &bytes))
    })
    .await?
}
