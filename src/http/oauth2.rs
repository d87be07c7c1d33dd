//! The authorization server's endpoints (D47): `POST /oauth2/token` (the spec's
//! Access_Token_URL; the client-credentials grant, RFC 6749 section 4.4), `GET /oauth2/jwks`
//! (the public keys) and `GET /.well-known/oauth-authorization-server` (RFC 8414). A token
//! request is small: its body is read within 8 KiB and the body timeout, and each client
//! address may ask a few times a second (a flood of wrong secrets costs one check each, and
//! its log lines are those of D44).

use super::{App, ConnInfo};
use crate::config::Access;
use crate::live::Live;
use crate::oauth2::{ALL_SCOPE, Issuer, KeyRing};
use base64::Engine;
use bytes::Buf;
use futures_util::{Stream, StreamExt};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use serde_json::{Value, json};
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;
use tokio::time::Instant;
use warp::reply::Response;

/// The paths served here.
pub const TOKEN: &str = "/oauth2/token";
/// The public keys.
pub const JWKS: &str = "/oauth2/jwks";
/// The metadata (RFC 8414).
pub const METADATA: &str = "/.well-known/oauth-authorization-server";

/// The largest token request read.
const MAX_FORM: usize = 8 * 1024;

/// Token requests a client address may make a second, and at once.
const PER_ADDRESS: (u32, u32) = (5, 20);

/// Client addresses the limiter follows before it forgets the idle ones.
const LIMITER_ENTRIES: usize = 4096;

/// What the endpoints serve.
pub struct Endpoints {
    /// The issuer and the keys it has signed with; a reload replaces them (D34).
    issuing: Live<(Issuer, KeyRing)>,
    /// Token requests per client address.
    limiter: DefaultKeyedRateLimiter<IpAddr>,
}

impl Endpoints {
    /// Issuing with `issuer`; `ring` holds its key and the ones still accepted.
    pub fn new(issuer: Issuer, ring: KeyRing) -> Self {
        let (rate, burst) = PER_ADDRESS;
        let quota = Quota::per_second(NonZeroU32::new(rate).unwrap_or(NonZeroU32::MIN))
            .allow_burst(NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN));
        Self {
            issuing: Live::new((issuer, ring)),
            limiter: RateLimiter::keyed(quota),
        }
    }

    /// Counts a token request from `ip` against its address's rate: an IPv6 client by its
    /// /64 (one host may hold all of it). The table forgets addresses whose burst is whole
    /// again once it holds many, so rotating addresses cannot grow it without end.
    fn check(
        &self,
        ip: IpAddr,
    ) -> Result<(), governor::NotUntil<<DefaultClock as Clock>::Instant>> {
        let key = match ip.to_canonical() {
            IpAddr::V6(v6) => {
                let mut octets = v6.octets();
                octets[8..].fill(0);
                IpAddr::V6(octets.into())
            }
            v4 => v4,
        };
        if self.limiter.len() > LIMITER_ENTRIES {
            self.limiter.retain_recent();
            self.limiter.shrink_to_fit();
        }
        self.limiter.check_key(&key)
    }

    /// A reload's issuer and keys; the per-address limits stay.
    pub fn renew(&self, issuer: Issuer, ring: KeyRing) {
        self.issuing.set((issuer, ring));
    }
}

/// Whether `path` is one of the endpoints.
pub fn serves(path: &str) -> bool {
    [TOKEN, JWKS, METADATA].contains(&path)
}

/// An RFC 6749 section 5.2 error.
struct OAuthError {
    status: StatusCode,
    error: &'static str,
    description: String,
    /// Retry-After, for a client address over its rate.
    retry_after: Option<u64>,
    /// The client authenticated with HTTP Basic: 401 names that scheme.
    basic: bool,
}

fn oauth_error(
    status: StatusCode,
    error: &'static str,
    description: impl Into<String>,
) -> OAuthError {
    OAuthError {
        status,
        error,
        description: description.into(),
        retry_after: None,
        basic: false,
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut r = Response::new(body.to_string().into());
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // RFC 6749 section 5.1: tokens and errors are not cached.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    r
}

/// The answer of one of the endpoints.
pub async fn answer(
    app: &App,
    path: &str,
    method: &Method,
    headers: &HeaderMap,
    conn: Option<ConnInfo>,
    body: &mut (impl Stream<Item = Result<impl Buf, warp::Error>> + Unpin + Send),
) -> Response {
    let Some(endpoints) = app.oauth2.as_ref() else {
        return json_response(
            StatusCode::NOT_FOUND,
            &json!({"status": "FAILED", "message": format!("no interface at {path}")}),
        );
    };
    let get = method == Method::GET || method == Method::HEAD;
    match path {
        JWKS if get => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            json_response(StatusCode::OK, &endpoints.issuing.get().1.jwks(now))
        }
        METADATA if get => json_response(StatusCode::OK, &metadata(app, endpoints, headers)),
        TOKEN if method == Method::POST => {
            let client = conn.map(|c| c.client);
            match token(app, endpoints, headers, client, body).await {
                Ok(issued) => json_response(StatusCode::OK, &issued),
                Err(e) => refusal(e),
            }
        }
        _ => {
            let allow = if path == TOKEN { "POST" } else { "GET, HEAD" };
            let mut r = json_response(
                StatusCode::METHOD_NOT_ALLOWED,
                &json!({"status": "FAILED", "message": format!("method {method} is not allowed; use {allow}")}),
            );
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(allow));
            r
        }
    }
}

fn refusal(e: OAuthError) -> Response {
    let unread = matches!(
        e.status,
        StatusCode::PAYLOAD_TOO_LARGE | StatusCode::REQUEST_TIMEOUT | StatusCode::BAD_REQUEST
    ) && e.error == "invalid_request";
    let mut r = json_response(
        e.status,
        &json!({"error": e.error, "error_description": e.description}),
    );
    if e.status == StatusCode::UNAUTHORIZED {
        let challenge = if e.basic {
            r#"Basic realm="ap-intake""#
        } else {
            r#"Bearer realm="ap-intake""#
        };
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(challenge),
        );
    }
    if let Some(secs) = e.retry_after
        && let Ok(v) = HeaderValue::from_str(&secs.to_string())
    {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    if unread && e.status != StatusCode::BAD_REQUEST {
        // Part of the body may be left unread: the connection closes (D26).
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

/// RFC 8414 metadata: where the endpoints are, as this request reached the service.
fn metadata(app: &App, endpoints: &Endpoints, headers: &HeaderMap) -> Value {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let scheme = if app.tls { "https" } else { "http" };
    let mut scopes: Vec<&str> = crate::interfaces::INTERFACES.iter().map(|i| i.id).collect();
    scopes.push(ALL_SCOPE);
    json!({
        "issuer": endpoints.issuing.get().0.name(),
        "token_endpoint": format!("{scheme}://{host}{TOKEN}"),
        "jwks_uri": format!("{scheme}://{host}{JWKS}"),
        "grant_types_supported": ["client_credentials"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "response_types_supported": [],
        "scopes_supported": scopes,
    })
}

/// A token request (RFC 6749 section 4.4.2), from a client address within its rate.
async fn token(
    app: &App,
    endpoints: &Endpoints,
    headers: &HeaderMap,
    client: Option<IpAddr>,
    body: &mut (impl Stream<Item = Result<impl Buf, warp::Error>> + Unpin + Send),
) -> Result<Value, OAuthError> {
    // Read first (it is small and bounded), so the connection stays usable whatever the
    // answer.
    let form = read_form(body, app.body_timeout).await?;
    if let Some(ip) = client
        && let Err(not_until) = endpoints.check(ip)
    {
        let wait = not_until.wait_time_from(DefaultClock::default().now());
        let mut e = oauth_error(
            StatusCode::TOO_MANY_REQUESTS,
            "invalid_request",
            "too many token requests from this address; retry later",
        );
        e.retry_after = Some(super::auth::retry_after_secs(wait));
        return Err(e);
    }
    let media = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(str::trim);
    if !media.is_some_and(|m| m.eq_ignore_ascii_case("application/x-www-form-urlencoded")) {
        return Err(oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "send the parameters as application/x-www-form-urlencoded",
        ));
    }
    let params = parameters(&form)?;
    let param = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let basic = basic_credentials(headers)?;
    let posted = param("client_secret").map(|s| (param("client_id").unwrap_or(""), s));
    let (id, secret, used_basic) = match (&basic, posted) {
        (Some(_), Some(_)) => {
            return Err(oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "authenticate the client one way: HTTP Basic or client_secret, not both",
            ));
        }
        (Some((id, secret)), None) => (id.as_str(), secret.as_str(), true),
        (None, Some((id, secret))) => (id, secret, false),
        (None, None) => {
            return Err(oauth_error(
                StatusCode::UNAUTHORIZED,
                "invalid_client",
                "authenticate the client: HTTP Basic, or client_id and client_secret",
            ));
        }
    };
    let auth = app.auth.get();
    let Ok((c, _)) = auth.client_with_secret(id, secret) else {
        let mut e = oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "unknown client or wrong secret",
        );
        e.basic = used_basic;
        return Err(e);
    };
    match param("grant_type") {
        Some("client_credentials") => {}
        Some(other) => {
            return Err(oauth_error(
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                format!("grant_type {other:?} is not supported; use client_credentials"),
            ));
        }
        None => {
            return Err(oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "grant_type is missing; use client_credentials",
            ));
        }
    }
    let scope = granted_scope(param("scope"), &c.access)?;
    let issued = endpoints
        .issuing
        .get()
        .0
        .issue(&c.client_id, &scope)
        .map_err(|e| oauth_error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", e))?;
    Ok(json!({
        "access_token": issued.access_token,
        "token_type": "Bearer",
        "expires_in": issued.expires_in,
        "scope": issued.scope,
    }))
}

/// The scope a client asked for, within what it may use; all of that when it asked none.
fn granted_scope(asked: Option<&str>, access: &Access) -> Result<Vec<String>, OAuthError> {
    let allowed = |id: &str| match access {
        Access::All => true,
        Access::Only(ids) => ids.contains(&id),
    };
    let Some(asked) = asked.filter(|s| !s.trim().is_empty()) else {
        return Ok(match access {
            Access::All => vec![ALL_SCOPE.to_string()],
            Access::Only(ids) => ids.iter().map(|i| i.to_string()).collect(),
        });
    };
    let mut scope = Vec::new();
    for s in asked.split(' ').filter(|s| !s.is_empty()) {
        let known = s == ALL_SCOPE || crate::interfaces::INTERFACES.iter().any(|i| i.id == s);
        let ok = match s {
            ALL_SCOPE => matches!(access, Access::All),
            id => known && allowed(id),
        };
        if !ok {
            return Err(oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_scope",
                format!("scope {s:?} is not one this client may have"),
            ));
        }
        if !scope.iter().any(|x| x == s) {
            scope.push(s.to_string());
        }
    }
    Ok(scope)
}

/// The request body, at most [`MAX_FORM`] bytes, by the body timeout.
async fn read_form(
    body: &mut (impl Stream<Item = Result<impl Buf, warp::Error>> + Unpin + Send),
    timeout: Duration,
) -> Result<Vec<u8>, OAuthError> {
    let deadline = Instant::now() + timeout;
    let mut form = Vec::new();
    loop {
        let next = tokio::time::timeout_at(deadline, body.next())
            .await
            .map_err(|_| {
                oauth_error(
                    StatusCode::REQUEST_TIMEOUT,
                    "invalid_request",
                    "the body came too slowly",
                )
            })?;
        let Some(chunk) = next else { return Ok(form) };
        let mut chunk = chunk
            .map_err(|e| oauth_error(StatusCode::BAD_REQUEST, "invalid_request", e.to_string()))?;
        while chunk.has_remaining() {
            let part = chunk.chunk();
            if form.len() + part.len() > MAX_FORM {
                return Err(oauth_error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "invalid_request",
                    format!("a token request is at most {MAX_FORM} bytes"),
                ));
            }
            form.extend_from_slice(part);
            let n = part.len();
            chunk.advance(n);
        }
    }
}

/// The form's parameters; one given twice is refused (RFC 6749 section 3.2).
fn parameters(form: &[u8]) -> Result<Vec<(String, String)>, OAuthError> {
    let mut params: Vec<(String, String)> = Vec::new();
    for (k, v) in form_urlencoded::parse(form) {
        if params.iter().any(|(seen, _)| *seen == k) {
            return Err(oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                format!("parameter {k} is given twice"),
            ));
        }
        params.push((k.into_owned(), v.into_owned()));
    }
    Ok(params)
}

/// `Authorization: Basic` client credentials: base64 of the form-encoded id and secret,
/// joined by `:` (RFC 6749 section 2.3.1).
fn basic_credentials(headers: &HeaderMap) -> Result<Option<(String, String)>, OAuthError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let bad = || {
        let mut e = oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "the Authorization header is not HTTP Basic client credentials",
        );
        e.basic = true;
        e
    };
    let text = value.to_str().map_err(|_| bad())?;
    let Some((scheme, encoded)) = text.split_once(' ') else {
        return Err(bad());
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(bad());
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| bad())?;
    let decoded = String::from_utf8(decoded).map_err(|_| bad())?;
    let (id, secret) = decoded.split_once(':').ok_or_else(bad)?;
    let unescape = |s: &str| -> String {
        form_urlencoded::parse(format!("x={s}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default()
    };
    Ok(Some((unescape(id), unescape(secret))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oauth2::SigningKey;
    use std::sync::Arc;

    fn endpoints() -> Endpoints {
        let pem = crate::oauth2::keys::generate_pem().unwrap();
        let key = Arc::new(SigningKey::from_pem(pem.as_bytes()).unwrap());
        let issuer = Issuer::new(Arc::clone(&key), "i", "a", Duration::from_secs(60));
        Endpoints::new(issuer, KeyRing::new(key))
    }

    /// An IPv6 client is limited by its /64: rotating through it gets no fresh bursts.
    #[test]
    fn an_ipv6_64_shares_one_rate() {
        let e = endpoints();
        let (_, burst) = PER_ADDRESS;
        for i in 0..burst {
            let ip: IpAddr = format!("2001:db8::{:x}", i + 1).parse().unwrap();
            assert!(e.check(ip).is_ok(), "request {i} of the burst");
        }
        assert!(e.check("2001:db8::ffff".parse().unwrap()).is_err());
        assert!(
            e.check("2001:db8:0:1::1".parse().unwrap()).is_ok(),
            "another /64"
        );
        assert!(e.check("192.0.2.1".parse().unwrap()).is_ok());
    }

    /// Past its size the table forgets addresses whose burst is whole again.
    #[test]
    fn the_table_forgets_idle_addresses() {
        let e = endpoints();
        for i in 0..(LIMITER_ENTRIES as u32 + 10) {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            let _ = e.check(ip);
        }
        // One request each: whole again after a fifth of a second (5 a second).
        std::thread::sleep(Duration::from_millis(400));
        let _ = e.check("192.0.2.1".parse().unwrap());
        assert!(e.limiter.len() <= 2, "{}", e.limiter.len());
    }
}
