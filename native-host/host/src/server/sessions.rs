//! `/api/devices` and `/api/sessions`: create, list, get, cancel, and the WebSocket stream.

use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use axum::Json;
use shared::protocol::{ClientMessage, CreateSession, DeviceInfo, Reply, SessionCreated, SessionInfo};

use super::access::{check_origin, query_param, require_content_type};
use super::error::ApiError;
use super::AppState;
use crate::sessions::Subscription;

/// Largest message a viewer may send on a session's WebSocket.
pub const MAX_CLIENT_MESSAGE: usize = 4096;

pub async fn devices(State(app): State<AppState>) -> Json<Vec<DeviceInfo>> {
    Json(app.sessions.devices())
}

pub async fn create(State(app): State<AppState>, req: Request) -> Result<(StatusCode, Json<SessionCreated>), ApiError> {
    let headers = req.headers().clone();
    require_content_type(&headers, "application/json", "POST /api/sessions")?;
    let body = read_json_body(&app, req).await?;
    let req: CreateSession = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("session request is not valid JSON for /api/sessions: {e}")))?;
    let sessions = app.sessions.clone();
    let (info, control) = tokio::task::spawn_blocking(move || sessions.create(req)).await??;
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or(&app.config.authority);
    // The link is passed on: it carries the view-only token, never the access token.
    let url = match &app.config.access.view_token {
        Some(view) => format!("http://{host}/sessions/{}?token={view}", info.id),
        None => format!("http://{host}/sessions/{}", info.id),
    };
    let sep = if url.contains('?') { '&' } else { '?' };
    let control_url = format!("{url}{sep}control={control}");
    tracing::info!(session = info.id, archive = info.archive, device = info.device, "session queued");
    Ok((StatusCode::CREATED, Json(SessionCreated { id: info.id, url, control, control_url })))
}

/// Reads a JSON body once its share of [`super::JSON_BYTES_IN_FLIGHT`] is free: what `Content-Length`
/// declares, or the largest body allowed when it declares nothing.
async fn read_json_body(app: &AppState, req: Request) -> Result<Bytes, ApiError> {
    let limit = super::MAX_JSON_BODY;
    let declared =
        req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(json_too_large(limit));
    }
    let kib = (declared.unwrap_or(limit).div_ceil(1024)).max(1) as u32;
    let _share =
        app.config.json_kib.acquire_many(kib).await.map_err(|_| ApiError::internal("the host is shutting down"))?;
    let _done = super::BodyDone;
    let mut body = req.into_body().into_data_stream();
    let mut out = bytes::BytesMut::with_capacity(declared.unwrap_or(0));
    while let Some(chunk) = futures_util::StreamExt::next(&mut body).await {
        let chunk = chunk.map_err(|e| ApiError::bad_request(format!("reading the request body failed: {e}")))?;
        if out.len() + chunk.len() > limit {
            return Err(json_too_large(limit));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out.freeze())
}

fn json_too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        format!("JSON request bodies are limited to {limit} bytes; put large inputs in the archive itself"),
    )
}

/// The query of `GET /api/sessions`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only the sessions of this archive (deleted or not).
    archive: Option<String>,
    /// The access token, when given in the query (checked before the handler runs).
    #[serde(rename = "token")]
    _token: Option<String>,
}

pub async fn list(
    State(app): State<AppState>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Vec<SessionInfo>>, ApiError> {
    let sessions = app.sessions.clone();
    Ok(Json(tokio::task::spawn_blocking(move || sessions.list(500, query.archive.as_deref())).await??))
}

pub async fn get(State(app): State<AppState>, Path(id): Path<String>) -> Result<Json<SessionInfo>, ApiError> {
    let sessions = app.sessions.clone();
    Ok(Json(tokio::task::spawn_blocking(move || sessions.info(&id)).await??))
}

/// `POST /api/sessions/{id}/cancel` with the control key as `X-Recap-Control` or `?control=`.
pub async fn cancel(
    State(app): State<AppState>,
    Path(id): Path<String>,
    req: Request,
) -> Result<Json<SessionInfo>, ApiError> {
    let key = req
        .headers()
        .get("x-recap-control")
        .and_then(|v| v.to_str().ok())
        .or_else(|| query_param(req.uri().query(), "control"))
        .ok_or_else(|| ApiError::new(StatusCode::FORBIDDEN, "forbidden", "cancelling needs the session's control key"))?
        .to_string();
    let sessions = app.sessions.clone();
    Ok(Json(tokio::task::spawn_blocking(move || sessions.cancel(&id, &key)).await??))
}

pub async fn websocket(
    State(app): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    check_origin(&app.config.access, &headers, "a WebSocket")?;
    let sessions = app.sessions.clone();
    let sub_id = id.clone();
    let subscription = tokio::task::spawn_blocking(move || sessions.subscribe(&sub_id)).await??;
    Ok(ws
        .max_message_size(MAX_CLIENT_MESSAGE)
        .max_frame_size(MAX_CLIENT_MESSAGE)
        .on_upgrade(move |socket| stream(app, id, subscription, socket)))
}

/// Sends the session's log from the start and follows it until it ends (then closes normally),
/// the viewer leaves, or the host shuts down; meanwhile answers the viewer's cancel requests.
async fn stream(app: AppState, id: String, mut sub: Subscription, mut socket: WebSocket) {
    loop {
        tokio::select! {
            batch = sub.next_batch() => {
                if batch.is_empty() {
                    let _ = socket.send(Message::Close(Some(CloseFrame { code: 1000, reason: "session ended".into() }))).await;
                    return;
                }
                for line in batch {
                    if socket.send(Message::Text(line.as_ref().into())).await.is_err() {
                        return;
                    }
                }
            }
            incoming = socket.recv() => match incoming {
                Some(Ok(Message::Text(text))) => {
                    if let Some(reply) = handle_client_message(&app, &id, text.as_str()).await {
                        let line = serde_json::to_string(&reply).expect("replies serialise");
                        if socket.send(Message::Text(line.into())).await.is_err() {
                            return;
                        }
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            },
            _ = app.shutdown.cancelled() => {
                let _ = socket.send(Message::Close(Some(CloseFrame { code: 1001, reason: "host shutting down".into() }))).await;
                return;
            }
        }
    }
}

async fn handle_client_message(app: &AppState, id: &str, text: &str) -> Option<Reply> {
    let message: ClientMessage = match serde_json::from_str(text) {
        Ok(m) => m,
        Err(e) => return Some(Reply::Error { code: "bad_request".into(), message: format!("unknown message: {e}") }),
    };
    match message {
        ClientMessage::Cancel { control } => {
            let sessions = app.sessions.clone();
            let id = id.to_string();
            match tokio::task::spawn_blocking(move || sessions.cancel(&id, &control)).await {
                Ok(Ok(_)) => None,
                Ok(Err(e)) => {
                    let e = ApiError::from(e);
                    Some(Reply::Error { code: e.code.into(), message: e.message })
                }
                Err(e) => Some(Reply::Error { code: "internal".into(), message: e.to_string() }),
            }
        }
    }
}
