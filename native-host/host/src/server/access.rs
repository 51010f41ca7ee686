//! Who may use the host, and from which page.
//!
//! A loopback port is not private: any page in the developer's browser can send it requests. Three
//! attacks are closed here, the way well-kept local servers close them:
//!
//! - **DNS rebinding.** A page at `evil.example:PORT`, whose name the attacker later points at
//!   127.0.0.1, is same-origin with this host as far as the browser knows, so it could read every
//!   answer. Every request (pages and API alike) must name this host in its `Host` header: an IP
//!   address this host is bound to, `localhost` when bound to loopback, or a name given with
//!   `--allow-host`. A rebinding attack always arrives with the attacker's name, never an IP literal.
//! - **Cross-site requests.** A foreign page can send a "simple" POST (`text/plain`, form encodings,
//!   no custom headers) without asking first and without reading the answer: enough to upload an
//!   archive and start a replay. State-changing API requests whose `Origin` (or, without one,
//!   `Sec-Fetch-Site`) says they come from another site are refused, and the API requires the
//!   content type it reads (`application/json`, `application/octet-stream`), which no simple request
//!   can carry.
//! - **CORS.** Preflights are answered on purpose: only origins given with `--allow-origin` get the
//!   headers that let their pages call the API; every other preflight is refused with a reason.
//!
//! Beyond loopback the API also wants a token. Share links carry a second, view-only token derived
//! from it: enough to read archives and follow sessions, never to upload, start or cancel anything.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::AppState;

/// Who may reach the host and from where, resolved once at start.
#[derive(Clone, Debug)]
pub struct Access {
    /// The address the listener is bound to.
    pub bound: SocketAddr,
    /// Host names (lower case, without a trailing dot), optionally with `:PORT`, given with `--allow-host`.
    pub allowed_hosts: Vec<String>,
    /// Exact origins (`https://viewer.example:8443`) whose pages may call the API (`--allow-origin`).
    pub allowed_origins: Vec<String>,
    /// Required for every API call when set.
    pub token: Option<String>,
    /// Grants reading (GET and WebSockets) only; derived from `token`.
    pub view_token: Option<String>,
}

impl Access {
    pub fn new(
        bound: SocketAddr,
        allowed_hosts: &[String],
        allowed_origins: &[String],
        token: Option<String>,
    ) -> Access {
        let allowed_hosts = allowed_hosts.iter().map(|h| h.trim_end_matches('.').to_ascii_lowercase()).collect();
        let allowed_origins = allowed_origins.iter().map(|o| o.trim_end_matches('/').to_ascii_lowercase()).collect();
        let view_token = token.as_deref().map(view_token_for);
        Access { bound, allowed_hosts, allowed_origins, token, view_token }
    }

    /// Whether a `Host` header value names this host (see the module docs).
    pub fn host_allowed(&self, host: &str) -> bool {
        let Some((name, port)) = split_host(host) else { return false };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let bound = self.bound.ip();
        if let Ok(ip) = name.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            return bound.is_unspecified() || ip == bound || (bound.is_loopback() && ip.is_loopback());
        }
        if name == "localhost" && (bound.is_loopback() || bound.is_unspecified()) {
            return true;
        }
        self.allowed_hosts.iter().any(|allowed| match allowed.rsplit_once(':') {
            Some((n, p)) if p.bytes().all(|b| b.is_ascii_digit()) => n == name && Some(p) == port,
            _ => *allowed == name,
        })
    }

    /// Whether a page of `origin` may act on this host, reached as `host`.
    pub fn origin_allowed(&self, origin: &str, host: &str) -> bool {
        let origin = origin.trim_end_matches('/').to_ascii_lowercase();
        let own = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|o| !host.is_empty() && o.eq_ignore_ascii_case(host));
        own || self.allowed_origins.contains(&origin)
    }
}

/// The view-only token that goes with an access token: 128 bits derived from it, so that it needs no
/// storage and share links stay valid across restarts for as long as the token does.
fn view_token_for(token: &str) -> String {
    let key = blake3::derive_key("recap host 2026-11 view-only share token", token.as_bytes());
    key[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// Splits `name[:port]` or `[v6]:port`; `None` when it is not a host at all.
fn split_host(host: &str) -> Option<(&str, Option<&str>)> {
    if host.is_empty() || host.bytes().any(|b| b.is_ascii_whitespace() || b == b'/' || b == b'@') {
        return None;
    }
    if host.starts_with('[') {
        let end = host.find(']')?;
        let rest = &host[end + 1..];
        return match rest.strip_prefix(':') {
            Some(port) => Some((&host[..=end], Some(port))),
            None if rest.is_empty() => Some((&host[..=end], None)),
            None => None,
        };
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') => Some((name, Some(port))),
        Some(_) => None,
        None => Some((host, None)),
    }
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The `Host` a request names (the header, or the authority of an absolute-form target).
fn request_host(req: &Request) -> Option<&str> {
    header_str(req.headers(), header::HOST).or_else(|| req.uri().authority().map(|a| a.as_str()))
}

/// Refuses every request whose `Host` does not name this host (DNS rebinding); runs before routing.
pub async fn check_host(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let access = &app.config.access;
    let refusal = match request_host(&req) {
        Some(host) if access.host_allowed(host) => None,
        Some(host) => Some(ApiError::new(
            StatusCode::FORBIDDEN,
            "foreign_host",
            format!(
                "this host does not answer to {host:?}: it is reached by its IP address{}, or by a name given with \
                 `recap serve --allow-host NAME`",
                if access.bound.ip().is_loopback() { " or localhost" } else { "" }
            ),
        )),
        None => Some(ApiError::bad_request("the request has no Host header")),
    };
    match refusal {
        Some(e) => e.into_response(),
        None => next.run(req).await,
    }
}

/// The value of `name` in a query string; several values for one name are refused by the callers
/// that need exactly one (see [`single_query_param`]).
pub fn query_param<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?.split('&').find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token a request presents: `Authorization: Bearer T` (the scheme in any case) or `?token=T`.
fn presented_token(req: &Request) -> Option<&str> {
    let bearer = header_str(req.headers(), header::AUTHORIZATION).and_then(|v| {
        let (scheme, rest) = v.trim().split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
    });
    bearer.or_else(|| query_param(req.uri().query(), "token"))
}

/// Whether a request only reads (a WebSocket opens with a GET).
fn reads_only(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD)
}

/// Whether a request is `POST .../sessions/{id}/cancel`: the session's control key, not the access
/// token, is what lets it act (the handler checks the key), so the view-only token of a share link
/// that came with the key cancels over REST as it does over the session's WebSocket.
fn is_cancel(req: &Request) -> bool {
    let mut parts = req.uri().path().trim_end_matches('/').rsplit('/');
    req.method() == Method::POST
        && parts.next() == Some("cancel")
        && parts.next().is_some_and(|id| !id.is_empty())
        && parts.next() == Some("sessions")
}

/// Requires the access token when one is set; the view-only token suffices for reading (and for
/// cancelling with a session's control key, see [`is_cancel`]).
pub async fn require_token(State(app): State<AppState>, req: Request, next: Next) -> Result<Response, ApiError> {
    let access = &app.config.access;
    if let Some(token) = &access.token {
        match presented_token(&req) {
            Some(p) if constant_time_eq(p.as_bytes(), token.as_bytes()) => {}
            Some(p) if access.view_token.as_ref().is_some_and(|v| constant_time_eq(p.as_bytes(), v.as_bytes())) => {
                if !reads_only(req.method()) && !is_cancel(&req) {
                    return Err(ApiError::new(
                        StatusCode::FORBIDDEN,
                        "view_only",
                        "this link's token is view-only: it can show archives and follow sessions, not upload, start, \
                         cancel or delete; use the host's access token for that",
                    ));
                }
            }
            Some(_) => {
                return Err(ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "the access token is wrong"))
            }
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

/// Region contents (`.../regions/{name}`) are the one answer a page elsewhere could make large at
/// will (an archive declaring a region of terabytes), and GETs pass the origin checks; so on a host
/// without a token, where nothing else stands between a foreign page and the data, a read of region
/// data that the browser says comes from another site is refused. A host with a token has already
/// checked it ([`require_token`] runs first).
pub async fn region_reads(State(app): State<AppState>, req: Request, next: Next) -> Result<Response, ApiError> {
    let access = &app.config.access;
    if access.token.is_none() {
        let headers = req.headers();
        let site = header_str(headers, HeaderName::from_static("sec-fetch-site"));
        let foreign_site =
            site.is_some_and(|s| s.eq_ignore_ascii_case("cross-site") || s.eq_ignore_ascii_case("same-site"));
        let host = header_str(headers, header::HOST).unwrap_or("");
        let foreign_origin = header_str(headers, header::ORIGIN).is_some_and(|o| !access.origin_allowed(o, host));
        if foreign_site || foreign_origin {
            let from = match (header_str(headers, header::ORIGIN), site) {
                (Some(origin), _) if foreign_origin => format!("origin {origin:?}"),
                (_, Some(site)) => format!("Sec-Fetch-Site: {site}"),
                _ => "another site".to_string(),
            };
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "foreign_origin",
                format!(
                    "region data is not served to pages of other sites ({from}) by a host without a token: \
                     download it from this host's own pages, or start the host with --token and send the token"
                ),
            ));
        }
    }
    Ok(next.run(req).await)
}

fn foreign_origin(what: &str, origin: &str, host: &str) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "foreign_origin",
        format!(
            "{what} from origin {origin:?} refused: only pages served by this host ({host}) or origins given with \
             `recap serve --allow-origin` may use the API"
        ),
    )
}

/// Refuses a request sent by a page of another site: `Origin` when the browser sent one, else a
/// `Sec-Fetch-Site` that says cross-site. Clients that are not browsers send neither and are judged
/// by the token alone.
pub fn check_origin(access: &Access, headers: &HeaderMap, what: &str) -> Result<(), ApiError> {
    let host = header_str(headers, header::HOST).unwrap_or("");
    match header_str(headers, header::ORIGIN) {
        Some(origin) if access.origin_allowed(origin, host) => Ok(()),
        Some(origin) => Err(foreign_origin(what, origin, host)),
        None if headers.get(header::ORIGIN).is_some() => Err(foreign_origin(what, "(not text)", host)),
        None => match header_str(headers, HeaderName::from_static("sec-fetch-site")) {
            Some(site) if site.eq_ignore_ascii_case("cross-site") || site.eq_ignore_ascii_case("same-site") => {
                Err(foreign_origin(what, &format!("(Sec-Fetch-Site: {site})"), host))
            }
            _ => Ok(()),
        },
    }
}

/// Methods and headers an allowed foreign origin may use.
const CORS_METHODS: &str = "GET, HEAD, POST, DELETE";
const CORS_HEADERS: &str = "authorization, content-type, x-recap-control";

/// The API's cross-origin rules: preflights answered here (allowed origins get the CORS headers,
/// others a refusal that says why), state-changing requests from foreign pages refused, and answers
/// to allowed foreign origins marked readable for them.
pub async fn cross_origin(State(app): State<AppState>, req: Request, next: Next) -> Result<Response, ApiError> {
    let access = &app.config.access;
    let host = header_str(req.headers(), header::HOST).unwrap_or("").to_string();
    let origin = header_str(req.headers(), header::ORIGIN).map(str::to_string);
    let foreign_allowed = origin
        .as_deref()
        .filter(|o| access.allowed_origins.iter().any(|a| a.eq_ignore_ascii_case(o)))
        .map(str::to_string);
    if req.method() == Method::OPTIONS {
        let Some(allowed) = foreign_allowed else {
            let origin = origin.unwrap_or_else(|| "(none)".into());
            return Err(foreign_origin("a CORS preflight", &origin, &host));
        };
        let mut res = StatusCode::NO_CONTENT.into_response();
        let h = res.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static(CORS_METHODS));
        h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static(CORS_HEADERS));
        h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
        allow_origin(&mut res, &allowed);
        return Ok(res);
    }
    if !reads_only(req.method()) {
        check_origin(access, req.headers(), &format!("{} {}", req.method(), req.uri().path()))?;
    }
    let mut res = next.run(req).await;
    if let Some(allowed) = foreign_allowed {
        allow_origin(&mut res, &allowed);
    }
    Ok(res)
}

fn allow_origin(res: &mut Response, origin: &str) {
    if let Ok(v) = HeaderValue::from_str(origin) {
        res.headers_mut().insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
        res.headers_mut().append(header::VARY, HeaderValue::from_static("Origin"));
    }
}

/// Requires a request body of `expected` type (parameters such as `; charset=utf-8` allowed), so that
/// no "simple" cross-site request (text/plain, forms) can reach a handler.
pub fn require_content_type(headers: &HeaderMap, expected: &str, what: &str) -> Result<(), ApiError> {
    let given = header_str(headers, header::CONTENT_TYPE);
    let essence = given.map(|v| v.split(';').next().unwrap_or("").trim());
    if essence.is_some_and(|e| e.eq_ignore_ascii_case(expected)) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        format!(
            "{what} takes `Content-Type: {expected}`, not {}",
            given.map(|g| format!("{g:?}")).unwrap_or_else(|| "a body without a content type".into())
        ),
    ))
}

/// The data folder's place in a message replaced by the path relative to it (`tmp/work-1/x.wrp`),
/// so that answers do not tell clients where the host keeps its files.
pub fn redact(message: &str, data_paths: &[String]) -> String {
    let mut out = message.to_string();
    for data in data_paths {
        out = out.replace(&format!("{data}/"), "").replace(data.as_str(), ".");
    }
    out
}

/// Largest error body read back to be rewritten (the API's own are a few hundred bytes).
const ERROR_BODY_MAX: usize = 64 << 10;

/// Turns every API error answer that is not already JSON (the framework's own refusals: a query
/// that does not parse, a wrong method, a body over its limit) into the API's JSON error body, and
/// takes the data folder's path out of every error message.
pub async fn json_errors(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let res = next.run(req).await;
    let status = res.status();
    let is_json = header_str(res.headers(), header::CONTENT_TYPE).is_some_and(|t| t.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) {
        return res;
    }
    let (parts, body) = res.into_parts();
    let text = match axum::body::to_bytes(body, ERROR_BODY_MAX).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_string(),
        Err(_) => String::new(),
    };
    let paths = &app.config.data_paths;
    if is_json {
        let (code, message) = match serde_json::from_str::<shared::protocol::ErrorBody>(&text) {
            Ok(body) => (body.error.code, redact(&body.error.message, paths)),
            Err(_) => ("internal".to_string(), "the error answer could not be read back".to_string()),
        };
        let body = shared::protocol::ErrorBody { error: shared::protocol::ErrorDetail { code, message } };
        let mut out = (status, axum::Json(body)).into_response();
        for (name, value) in parts.headers.iter() {
            if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
                out.headers_mut().insert(name.clone(), value.clone());
            }
        }
        return out;
    }
    let text = redact(&text, paths);
    let message = if text.is_empty() { status.canonical_reason().unwrap_or("error").to_lowercase() } else { text };
    let code = match status {
        StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => "bad_request",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::NOT_FOUND => "not_found",
        s if s.is_server_error() => "internal",
        _ => "bad_request",
    };
    let mut out = ApiError::new(status, code, message).into_response();
    // Keep what the framework said about the answer (`Allow` on a 405, `Connection: close`).
    for (name, value) in parts.headers.iter() {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(bound: &str, hosts: &[&str], origins: &[&str]) -> Access {
        let hosts: Vec<String> = hosts.iter().map(|s| s.to_string()).collect();
        let origins: Vec<String> = origins.iter().map(|s| s.to_string()).collect();
        Access::new(bound.parse().unwrap(), &hosts, &origins, None)
    }

    #[test]
    fn query_param_finds_exact_names() {
        assert_eq!(query_param(Some("a=1&token=xyz"), "token"), Some("xyz"));
        assert_eq!(query_param(Some("tokens=1"), "token"), None);
        assert_eq!(query_param(None, "token"), None);
    }

    #[test]
    fn loopback_host_answers_to_its_address_and_localhost_only() {
        let a = access("127.0.0.1:9000", &[], &[]);
        for ok in ["127.0.0.1:9000", "127.0.0.1", "localhost:9000", "LOCALHOST.:9000", "[::1]:9000", "127.0.0.2:9000"] {
            assert!(a.host_allowed(ok), "{ok}");
        }
        for bad in ["evil.example:9000", "evil.example", "10.0.0.1:9000", "", "a b", "user@127.0.0.1", "[::1", "1:2:3"]
        {
            assert!(!a.host_allowed(bad), "{bad}");
        }
    }

    #[test]
    fn configured_names_with_and_without_port() {
        let a = access("0.0.0.0:8080", &["recap.team.internal", "Proxy.Example:443"], &[]);
        assert!(a.host_allowed("10.1.2.3:8080"), "any address when bound to all interfaces");
        assert!(a.host_allowed("recap.team.internal:8080"));
        assert!(a.host_allowed("RECAP.team.internal"));
        assert!(a.host_allowed("proxy.example:443"));
        assert!(!a.host_allowed("proxy.example:8443"));
        assert!(!a.host_allowed("evil.example:8080"));
        assert!(a.host_allowed("localhost:8080"));
    }

    #[test]
    fn origins_must_be_this_host_or_configured() {
        let a = access("127.0.0.1:9000", &[], &["https://viewer.example:8443"]);
        assert!(a.origin_allowed("http://127.0.0.1:9000", "127.0.0.1:9000"));
        assert!(a.origin_allowed("https://viewer.example:8443/", "127.0.0.1:9000"));
        assert!(!a.origin_allowed("http://evil.example", "127.0.0.1:9000"));
        assert!(!a.origin_allowed("null", "127.0.0.1:9000"));
        assert!(!a.origin_allowed("http://127.0.0.1:9001", "127.0.0.1:9000"));
    }

    #[test]
    fn origin_check_reads_origin_then_fetch_metadata() {
        let a = access("127.0.0.1:9000", &[], &[]);
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:9000".parse().unwrap());
        assert!(check_origin(&a, &h, "x").is_ok(), "no browser headers: judged by the token alone");
        h.insert("sec-fetch-site", "cross-site".parse().unwrap());
        assert!(check_origin(&a, &h, "x").is_err());
        h.insert(header::ORIGIN, "http://127.0.0.1:9000".parse().unwrap());
        assert!(check_origin(&a, &h, "x").is_ok(), "Origin decides when present");
        h.insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        assert!(check_origin(&a, &h, "x").is_err());
    }

    #[test]
    fn content_type_essence_is_compared() {
        let mut h = HeaderMap::new();
        assert!(require_content_type(&h, "application/json", "x").is_err());
        h.insert(header::CONTENT_TYPE, "text/plain".parse().unwrap());
        assert!(require_content_type(&h, "application/json", "x").is_err());
        h.insert(header::CONTENT_TYPE, "Application/JSON; charset=utf-8".parse().unwrap());
        assert!(require_content_type(&h, "application/json", "x").is_ok());
    }

    #[test]
    fn view_token_is_stable_and_differs_from_the_token() {
        let a = Access::new("0.0.0.0:1".parse().unwrap(), &[], &[], Some("secret".into()));
        let b = Access::new("0.0.0.0:2".parse().unwrap(), &[], &[], Some("secret".into()));
        assert_eq!(a.view_token, b.view_token);
        assert_ne!(a.view_token.as_deref(), Some("secret"));
        assert_eq!(a.view_token.as_ref().unwrap().len(), 32);
    }
}
