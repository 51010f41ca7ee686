//! Who may use the API: a bearer token when the host is reachable beyond loopback, and WebSockets
//! only from pages this host served.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

use super::error::ApiError;
use super::AppState;

/// The value of `name` in a query string, percent-decoding not needed for our hex keys.
pub fn query_param<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?.split('&').find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Requires the access token (header `Authorization: Bearer T` or `?token=T`) when one is set.
pub async fn require_token(State(app): State<AppState>, req: Request, next: Next) -> Result<Response, ApiError> {
    if let Some(token) = &app.config.token {
        let bearer = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let presented = bearer.or_else(|| query_param(req.uri().query(), "token"));
        match presented {
            Some(p) if constant_time_eq(p.trim().as_bytes(), token.as_bytes()) => {}
            Some(_) => return Err(ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "the access token is wrong")),
            None => {
                return Err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "this host requires an access token: send `Authorization: Bearer TOKEN` or add `?token=TOKEN`",
                ))
            }
        }
    }
    Ok(next.run(req).await)
}

/// Refuses a WebSocket opened by a page from another origin (a browser always sends `Origin`;
/// other clients may omit it and are then judged by the token alone).
pub fn check_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(origin) = headers.get(header::ORIGIN) else { return Ok(()) };
    let origin = origin.to_str().unwrap_or("");
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    let origin_host = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
    if origin_host.is_some_and(|o| !host.is_empty() && o.eq_ignore_ascii_case(host)) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "foreign_origin",
        format!("WebSocket from origin {origin:?} refused: only pages served by this host ({host}) may connect"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_param_finds_exact_names() {
        assert_eq!(query_param(Some("a=1&token=xyz"), "token"), Some("xyz"));
        assert_eq!(query_param(Some("tokens=1"), "token"), None);
        assert_eq!(query_param(None, "token"), None);
    }

    #[test]
    fn origin_must_match_host() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:9000".parse().unwrap());
        assert!(check_origin(&h).is_ok());
        h.insert(header::ORIGIN, "http://127.0.0.1:9000".parse().unwrap());
        assert!(check_origin(&h).is_ok());
        h.insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        assert!(check_origin(&h).is_err());
        h.insert(header::ORIGIN, "null".parse().unwrap());
        assert!(check_origin(&h).is_err());
    }
}
