//! `/api/devices` and `/api/sessions`: create, list, get, cancel, and the WebSocket stream.

use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use axum::Json;
use shared::protocol::{ClientMessage, CreateSession, DeviceInfo, Reply, SessionCreated, SessionInfo};

use super::access::{check_origin, query_param};
use super::error::ApiError;
use super::AppState;
use crate::sessions::Subscription;

/// Largest message a viewer may send on a session's WebSocket.
pub const MAX_CLIENT_MESSAGE: usize = 4096;

pub async fn devices(State(app): State<AppState>) -> Json<Vec<DeviceInfo>> {
    Json(app.sessions.devices())
}

pub async fn create(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<SessionCreated>), ApiError> {
    let req: CreateSession = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("session request is not valid JSON for /api/sessions: {e}")))?;
    let sessions = app.sessions.clone();
    let (info, control) = tokio::task::spawn_blocking(move || sessions.create(req)).await??;
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or(&app.config.authority);
    let url = match &app.config.token {
        Some(token) => format!("http://{host}/sessions/{}?token={token}", info.id),
        None => format!("http://{host}/sessions/{}", info.id),
    };
    let sep = if url.contains('?') { '&' } else { '?' };
    let control_url = format!("{url}{sep}control={control}");
    tracing::info!(session = info.id, archive = info.archive, device = info.device, "session queued");
    Ok((StatusCode::CREATED, Json(SessionCreated { id: info.id, url, control, control_url })))
}

pub async fn list(State(app): State<AppState>) -> Result<Json<Vec<SessionInfo>>, ApiError> {
    let sessions = app.sessions.clone();
    Ok(Json(tokio::task::spawn_blocking(move || sessions.list(500)).await??))
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
        .ok_or_else(|| {
            ApiError::new(StatusCode::FORBIDDEN, "forbidden", "cancelling needs the session's control key")
        })?
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
    check_origin(&headers)?;
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
