//! One handler for all interfaces. Everything that can be decided from the request line and
//! headers (path, method, key, content type, declared length, query) is decided before the
//! body is read (D20).

use super::body::{self, Coding};
use super::reply::{self, ApiError};
use super::{App, ConnInfo};
use crate::budget::SMALL_REQUEST_BYTES;
use crate::intake::Take;
use crate::interfaces::{self, Interface};
use crate::queue::receipt::RequestInfo;
use crate::validate::cost::ORDINARY_CHARGE_PER_BYTE;
use bytes::Buf;
use futures_util::{Stream, StreamExt};
use http::{HeaderMap, HeaderValue, Method, header};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use warp::Filter;
use warp::path::FullPath;
use warp::reply::Response;

/// The filter serving every request: one route filter per family, tried in this order, each
/// matching on the request's path alone, so only the family that matched takes the body:
/// the console (the document and `/docs`, D38), a target that is no path (D42), receipts
/// (`/requests/<id>`, D38), the outcome feed (`/requests`, D48), dry runs (`/validate/<interface path>`, D38) and the interfaces
/// (every other path: an unknown one is answered 404 there, counted and logged like them).
pub fn routes(app: Arc<App>) -> impl Filter<Extract = (Response,), Error = Infallible> + Clone {
    let head = || {
        warp::method()
            .and(warp::header::headers_cloned())
            .and(warp::ext::optional::<ConnInfo>())
    };
    let console = family(&app, |app, p| app.console.serves(p).then(|| p.to_string()))
        .and(head())
        .then(console_page);
    let no_path = family(&app, |_, p| (p == "*").then_some(()))
        .and(head())
        .then(no_path);
    let receipts = family(&app, |_, p| {
        p.strip_prefix("/requests/").map(str::to_string)
    })
    .and(head())
    .then(receipt);
    let raw_query = || warp::query::raw().or(warp::any().map(String::new)).unify();
    let outcome_feed = family(&app, |_, p| (p == "/requests").then_some(()))
        .and(head())
        .and(raw_query())
        .then(outcome_feed);
    let authorization = family(&app, |_, p| super::oauth2::serves(p).then(|| p.to_string()))
        .and(head())
        .and(warp::body::stream())
        .then(authorization_server);
    let dry_runs = family(&app, |_, p| {
        // D38: `/validate/<interface path>` is the interface's dry run.
        let target = p.strip_prefix("/validate").filter(|t| t.starts_with('/'))?;
        Some(Target::of(p, target, true))
    });
    let interfaces = family(&app, |_, p| Some(Target::of(p, p, false)));
    let submissions = dry_runs
        .or(interfaces)
        .unify()
        .and(head())
        .and(raw_query())
        .and(warp::body::stream())
        .then(submit);
    let fallback = Arc::clone(&app);
    console
        .or(no_path)
        .unify()
        .or(receipts)
        .unify()
        .or(outcome_feed)
        .unify()
        .or(authorization)
        .unify()
        .or(submissions)
        .unify()
        .recover(move |rejection: warp::Rejection| {
            // Only reachable if warp itself refuses the request (its body already taken).
            let request_id = fallback.request_ids.fresh();
            tracing::error!(request_id, ?rejection, "request rejected by the HTTP layer");
            let r = ApiError::Internal(format!("{rejection:?}")).response(&request_id);
            async move { Ok::<_, Infallible>(with_request_id(r, &request_id)) }
        })
        .unify()
}

/// The requests whose path `pick` picks, with what it picked; any other path is left to the
/// next family.
fn family<T: Send + 'static>(
    app: &Arc<App>,
    pick: fn(&App, &str) -> Option<T>,
) -> impl Filter<Extract = (Arc<App>, T), Error = warp::Rejection> + Clone + use<T> {
    let app = Arc::clone(app);
    warp::path::full()
        .and_then(move |p: FullPath| {
            let app = Arc::clone(&app);
            async move {
                match pick(&app, p.as_str()) {
                    Some(picked) => Ok((app, picked)),
                    None => Err(warp::reject::not_found()),
                }
            }
        })
        .untuple_one()
}

/// Where a submission goes.
struct Target {
    /// The request's path, as the client wrote it.
    path: String,
    /// The interface of that path (of the path after `/validate` for a dry run).
    iface: Option<&'static Interface>,
    /// `POST /validate/<path>` (D38).
    dry_run: bool,
}

impl Target {
    fn of(path: &str, target: &str, dry_run: bool) -> Self {
        Self {
            path: path.to_string(),
            iface: interfaces::by_path(target),
            dry_run,
        }
    }
}

fn with_request_id(mut response: Response, request_id: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(request_id) {
        response.headers_mut().insert("x-request-id", v);
    }
    response
}

/// The console's paths serve GET and HEAD (D38); another method gets 405 (D42).
async fn console_page(
    app: Arc<App>,
    path: String,
    method: Method,
    headers: HeaderMap,
    conn: Option<ConnInfo>,
) -> Response {
    let started = Instant::now();
    let request_id = app.request_ids.for_request(&headers);
    match app.console.answer(&method, &path) {
        Some(page) => with_request_id(page, &request_id),
        None => {
            let refusal = ApiError::MethodNotAllowed(method.to_string(), "GET, HEAD");
            refused(&app, refusal, &method, &request_id, conn, started)
        }
    }
}

/// The methods a request whose target is not a path may use anywhere on this server.
const ANY_PATH: &str = "GET, HEAD, POST";

/// A target that is no path (`conn.rs` hands those on as `*`): 405 for `CONNECT` and
/// `OPTIONS`, 400 otherwise (D42).
async fn no_path(
    app: Arc<App>,
    (): (),
    method: Method,
    headers: HeaderMap,
    conn: Option<ConnInfo>,
) -> Response {
    let started = Instant::now();
    let request_id = app.request_ids.for_request(&headers);
    let refusal = if method == Method::CONNECT || method == Method::OPTIONS {
        ApiError::MethodNotAllowed(method.to_string(), ANY_PATH)
    } else {
        ApiError::NotAPath
    };
    refused(&app, refusal, &method, &request_id, conn, started)
}

/// A refusal decided from the request line alone, counted and logged.
fn refused(
    app: &App,
    refusal: ApiError,
    method: &Method,
    request_id: &str,
    conn: Option<ConnInfo>,
    started: Instant,
) -> Response {
    let response = with_request_id(refusal.response(request_id), request_id);
    let status = response.status().as_u16();
    app.metrics
        .request("-", status, 0, 0, started.elapsed().as_secs_f64());
    if app.request_log.answered(status, conn.map(|c| c.client)) {
        let peer = conn.map_or_else(|| "-".to_string(), |c| c.shown());
        tracing::info!(request_id, peer, key = "-", interface = "-", status, %method, "request");
    }
    response
}

/// `/requests/<id>` (D38).
async fn receipt(
    app: Arc<App>,
    id: String,
    method: Method,
    headers: HeaderMap,
    _conn: Option<ConnInfo>,
) -> Response {
    let request_id = app.request_ids.for_request(&headers);
    super::receipts::answer(&app, &method, &id, &headers, &request_id).await
}

/// `GET /requests` (D48).
async fn outcome_feed(
    app: Arc<App>,
    (): (),
    method: Method,
    headers: HeaderMap,
    _conn: Option<ConnInfo>,
    query: String,
) -> Response {
    let request_id = app.request_ids.for_request(&headers);
    super::feed::answer(&app, &method, &query, &headers, &request_id).await
}

/// `/oauth2/token`, the JWKS and the metadata (D47), counted and logged as refusals are.
async fn authorization_server(
    app: Arc<App>,
    path: String,
    method: Method,
    headers: HeaderMap,
    conn: Option<ConnInfo>,
    mut body: impl Stream<Item = Result<impl Buf, warp::Error>> + Unpin + Send,
) -> Response {
    let started = Instant::now();
    let request_id = app.request_ids.for_request(&headers);
    let answer = super::oauth2::answer(&app, &path, &method, &headers, conn, &mut body).await;
    let response = with_request_id(answer, &request_id);
    let status = response.status().as_u16();
    app.metrics
        .request("-", status, 0, 0, started.elapsed().as_secs_f64());
    if app.request_log.answered(status, conn.map(|c| c.client)) {
        let peer = conn.map_or_else(|| "-".to_string(), |c| c.shown());
        tracing::info!(
            request_id,
            peer,
            status,
            path,
            "authorization server request"
        );
    }
    response
}

/// What the handler learnt about the request's body by the time it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyState {
    /// Not read at all: the answer was decided from the head.
    Unread,
    /// Read in part (refused while it arrived).
    Partial,
    /// Read to its end.
    Complete,
}

/// A small unread body is read and dropped after an early answer so the connection can be
/// kept; a larger one closes it, saying so (D26).
const DRAIN_LIMIT: usize = 64 * 1024;

/// How long draining such a body may take.
const DRAIN_TIME: Duration = Duration::from_secs(2);

/// An interface's submission or dry run: everything the head decides, then the body, then
/// the answer, counted and logged (D20).
async fn submit(
    app: Arc<App>,
    target: Target,
    method: Method,
    headers: HeaderMap,
    conn: Option<ConnInfo>,
    query: String,
    mut body: impl Stream<Item = Result<impl Buf, warp::Error>> + Unpin + Send,
) -> Response {
    let started = Instant::now();
    let request_id = app.request_ids.for_request(&headers);
    let mut key_name = None;
    let mut state = BodyState::Unread;
    let iface = target.iface;
    let result = accept(
        &app,
        Request {
            method: &method,
            path: &target.path,
            iface,
            dry_run: target.dry_run,
            request_id: &request_id,
            query: &query,
            headers: &headers,
            started,
        },
        &mut body,
        &mut key_name,
        &mut state,
    )
    .await;
    let response = match &result {
        Ok(o) => reply::outcome(o, &request_id),
        Err(e) => e.response(&request_id),
    };
    let mut response = with_request_id(response, &request_id);
    let http1 = conn.is_none_or(|c| c.http1);
    if http1 && state != BodyState::Complete && !drained(state, &headers, &mut body).await {
        // D26: the client must not write its next request into a connection we close.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    let (accepted, failed) = result.as_ref().map_or((0, 0), |o| (o.succeeded, o.failed));
    let status = response.status().as_u16();
    let interface = iface.map_or("-", |i| i.id);
    let key = key_name.as_deref().unwrap_or("-");
    let elapsed = started.elapsed().as_secs_f64();
    app.metrics
        .request(interface, status, accepted, failed, elapsed);
    if !app.request_log.answered(status, conn.map(|c| c.client)) {
        return response;
    }
    let peer = conn.map_or_else(|| "-".to_string(), |c| c.shown());
    let latency_ms = format_args!("{:.3}", elapsed * 1000.0);
    match &result {
        Err(ApiError::Intake(crate::intake::IntakeError::Storage(e))) => tracing::error!(
            request_id, peer, key, interface, status, error = %e, %latency_ms,
            "request failed: queue storage"),
        Err(ApiError::Intake(crate::intake::IntakeError::Internal(e))) => tracing::error!(
            request_id, peer, key, interface, status, error = %e, %latency_ms,
            "request failed: internal error"),
        _ => tracing::info!(
            request_id, peer, key, interface, status, accepted, failed, %latency_ms, "request"),
    }
    response
}

/// Reads and drops the rest of a body left unread by an early answer, when it is small
/// enough; false when the connection should close instead. A client that expects
/// `100 Continue` holds its body back: reading it would send the 100 and then wait for a
/// body the answer made pointless, so the answer goes at once and the connection closes
/// (RFC 9110 section 10.1.1).
async fn drained(
    state: BodyState,
    headers: &HeaderMap,
    body: &mut (impl Stream<Item = Result<impl Buf, warp::Error>> + Unpin + Send),
) -> bool {
    let expects_continue = headers
        .get_all(header::EXPECT)
        .iter()
        .any(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if state == BodyState::Partial
        || expects_continue
        || declared_length(headers).is_some_and(|n| n > DRAIN_LIMIT as u64)
    {
        return false;
    }
    let drain = async {
        let mut seen = 0usize;
        while let Some(chunk) = body.next().await {
            match chunk {
                Ok(c) => seen += c.remaining(),
                Err(_) => return false,
            }
            if seen > DRAIN_LIMIT {
                return false;
            }
        }
        true
    };
    tokio::time::timeout(DRAIN_TIME, drain)
        .await
        .unwrap_or(false)
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// The parts of a request decided before its body.
struct Request<'a> {
    method: &'a Method,
    path: &'a str,
    iface: Option<&'static Interface>,
    /// `POST /validate/<path>` (D38).
    dry_run: bool,
    request_id: &'a str,
    query: &'a str,
    headers: &'a HeaderMap,
    started: Instant,
}

async fn accept(
    app: &App,
    req: Request<'_>,
    body: &mut (impl Stream<Item = Result<impl Buf, warp::Error>> + Unpin + Send),
    key_name: &mut Option<String>,
    state: &mut BodyState,
) -> Result<crate::intake::Outcome, ApiError> {
    let iface = req
        .iface
        .ok_or_else(|| ApiError::NotFound(req.path.to_string()))?;
    if req.method != Method::POST {
        return Err(ApiError::MethodNotAllowed(req.method.to_string(), "POST"));
    }
    *key_name = app
        .auth
        .get()
        .admit_following(req.headers, Some(iface))
        .await?;
    check_transfer_encoding(req.headers)?;
    check_content_type(req.headers)?;
    let coding = content_coding(req.headers)?;
    let declared = declared_length(req.headers);
    if declared.is_some_and(|n| n > app.max_body_bytes) {
        return Err(ApiError::BodyTooLarge(app.max_body_bytes));
    }
    let query = (!req.query.is_empty()).then_some(req.query);
    let accounting_type = app
        .intake
        .checker()
        .check_query(iface, query)
        .map_err(crate::intake::IntakeError::from)?;
    // D40: after a failed flush (or a newer node's migration) nothing more is stored, and
    // the service is about to exit: the answer is 503 at once, without waiting for a body
    // not worth reading.
    if let Some(why) = app.store.halt().as_ref().and_then(|h| h.reason()) {
        let refused = why.error("the queue");
        return Err(crate::intake::IntakeError::Storage(refused).into());
    }
    // Admission (D27): wait in line, holding nothing, for what a body of this length
    // ordinarily takes once parsed; one without a declared length starts small.
    let deadline = req.started + app.body_timeout;
    let expected = declared.map_or(SMALL_REQUEST_BYTES, |n| {
        usize::try_from(n)
            .unwrap_or(usize::MAX)
            .saturating_mul(ORDINARY_CHARGE_PER_BYTE)
    });
    let mut charge = app.budget.admit(expected, deadline).await?;
    *state = BodyState::Partial;
    let body = body::read(
        body,
        coding,
        declared,
        app.max_body_bytes,
        &app.budget,
        &mut charge,
        deadline,
        app.body_timeout,
    )
    .await?;
    *state = BodyState::Complete;
    // Waiting to grow (one request at a time) may take a second past the body timeout.
    let deadline = deadline.max(Instant::now() + Duration::from_secs(1));
    let take = if req.dry_run {
        Take::DryRun
    } else {
        Take::Queue(app.receipts.then(|| {
            Arc::new(RequestInfo {
                request_id: req.request_id.to_string(),
                api_key: key_name.clone().unwrap_or_default(),
                interface: iface.id,
                received_at_ms: crate::queue::now_ms(),
                nonce: app.request_ids.nonce(),
            })
        }))
    };
    Ok(app
        .intake
        .submit(iface, accounting_type, body, &mut charge, deadline, take)
        .await?)
}

/// A JSON media type, compared case-insensitively with parameters allowed (D5); a charset
/// other than UTF-8 is refused (D25).
fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Err(ApiError::UnsupportedMediaType(
            "Content-Type is missing; send application/json".into(),
        ));
    };
    let text = value.to_str().unwrap_or_default();
    let mut parts = text.split(';');
    let media = parts.next().unwrap_or_default().trim();
    if !media.eq_ignore_ascii_case("application/json") {
        return Err(ApiError::UnsupportedMediaType(format!(
            "Content-Type {text:?} is not supported; send application/json"
        )));
    }
    for param in parts {
        let Some((name, value)) = param.split_once('=') else {
            continue;
        };
        let value = value.trim().trim_matches('"');
        if name.trim().eq_ignore_ascii_case("charset") && !value.eq_ignore_ascii_case("utf-8") {
            return Err(ApiError::UnsupportedMediaType(format!(
                "only UTF-8 JSON is accepted (charset={value})"
            )));
        }
    }
    Ok(())
}

/// The body's content coding: identity or gzip (D25).
fn content_coding(headers: &HeaderMap) -> Result<Coding, ApiError> {
    let mut coding = Coding::Identity;
    for value in headers.get_all(header::CONTENT_ENCODING) {
        let text = value.to_str().unwrap_or("?");
        for c in text.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            if c.eq_ignore_ascii_case("identity") {
                continue;
            }
            if c.eq_ignore_ascii_case("gzip") && coding == Coding::Identity {
                coding = Coding::Gzip;
                continue;
            }
            return Err(ApiError::UnsupportedMediaType(format!(
                "content encoding {c} is not supported (supported: gzip, identity)"
            )));
        }
    }
    Ok(coding)
}

/// Only `chunked` framing is understood (D25); hyper itself refuses a request whose last
/// transfer coding is not `chunked`.
fn check_transfer_encoding(headers: &HeaderMap) -> Result<(), ApiError> {
    for value in headers.get_all(header::TRANSFER_ENCODING) {
        let text = value.to_str().unwrap_or("?");
        for c in text.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            if !c.eq_ignore_ascii_case("chunked") {
                return Err(ApiError::NotImplemented(format!(
                    "transfer encoding {c} is not supported (supported: chunked)"
                )));
            }
        }
    }
    Ok(())
}
