//! `GET /requests` (D48): the outcome feed of the caller's own records, a page at a time.
//! What a page holds and why a cursor never skips is in the queue crate (`feed.rs`); this
//! reads the query, authenticates and answers.

use super::App;
use super::reply::{self, ApiError};
use crate::intake::IntakeError;
use crate::interfaces;
use crate::queue::feed::{self, Position};
use crate::queue::receipt::ReceiptState;
use crate::status::receipt::{path_of, rfc3339, word};
use http::{HeaderMap, Method, StatusCode};
use serde::Serialize;
use warp::reply::Response;

/// A page's size when the query names none.
pub const DEFAULT_LIMIT: usize = 100;
/// The largest page.
pub const MAX_LIMIT: usize = 500;

/// The states the feed lists, in the order a query without `state` asks for them.
const STATES: [ReceiptState; 4] = [
    ReceiptState::Rejected,
    ReceiptState::Quarantined,
    ReceiptState::Delivered,
    ReceiptState::Superseded,
];

/// Why a feed query is refused (400): each names the parameter and the rule.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QueryError {
    /// A parameter the feed does not take.
    #[error("unknown query parameter {0:?}; the feed takes state, interface, limit and after")]
    Unknown(String),
    /// A parameter other than `state` given twice.
    #[error("query parameter {0} is given more than once")]
    Repeated(&'static str),
    /// A state the feed does not list.
    #[error(
        "state: {0:?} is not a state the feed lists; use rejected, quarantined, delivered or \
         superseded (several separated by commas)"
    )]
    State(String),
    /// An interface that does not exist.
    #[error("interface: no interface {0:?}; use an interface's path, such as /vendor-data/v1")]
    Interface(String),
    /// A limit out of range or not a number.
    #[error("limit: {0:?} is not a whole number from 1 to 500")]
    Limit(String),
    /// A cursor this service did not give (or gave on another queue engine).
    #[error(
        "after: {0:?} is not a cursor this feed gave; pass back the next of an earlier page, \
         or leave after out to start from the oldest change"
    )]
    Cursor(String),
}

/// A feed query, read.
#[derive(Debug, PartialEq, Eq)]
pub struct Query {
    /// The states asked for, each once.
    pub states: Vec<ReceiptState>,
    /// Only this interface's records.
    pub interface: Option<&'static str>,
    /// At most this many.
    pub limit: usize,
    /// After this place.
    pub after: Option<Position>,
    /// The cursor as sent (for the message when the queue does not know it).
    pub cursor: Option<String>,
}

impl Query {
    /// Reads `state`, `interface`, `limit` and `after` from a query string.
    pub fn parse(query: &str) -> Result<Self, QueryError> {
        let mut states = Vec::new();
        let (mut interface, mut limit, mut after) = (None, None, None);
        for (name, value) in form_urlencoded::parse(query.as_bytes()) {
            let once = |taken: bool, name| match taken {
                true => Err(QueryError::Repeated(name)),
                false => Ok(()),
            };
            match name.as_ref() {
                "state" => {
                    for word in value.split(',') {
                        let state = STATES
                            .into_iter()
                            .find(|s| self::word(*s) == word.trim())
                            .ok_or_else(|| QueryError::State(shown(word)))?;
                        if !states.contains(&state) {
                            states.push(state);
                        }
                    }
                }
                "interface" => {
                    once(interface.is_some(), "interface")?;
                    let found = interfaces::by_path(&value).or_else(|| interfaces::by_id(&value));
                    interface = Some(
                        found
                            .ok_or_else(|| QueryError::Interface(shown(&value)))?
                            .id,
                    );
                }
                "limit" => {
                    once(limit.is_some(), "limit")?;
                    let n = value
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=MAX_LIMIT).contains(n) && !value.starts_with('+'));
                    limit = Some(n.ok_or_else(|| QueryError::Limit(shown(&value)))?);
                }
                "after" => {
                    once(after.is_some(), "after")?;
                    after = Some(value.into_owned());
                }
                other => return Err(QueryError::Unknown(shown(other))),
            }
        }
        let position = match &after {
            Some(c) => Some(Position::parse(c).ok_or_else(|| QueryError::Cursor(shown(c)))?),
            None => None,
        };
        if states.is_empty() {
            states = STATES.to_vec();
        }
        Ok(Self {
            states,
            interface,
            limit: limit.unwrap_or(DEFAULT_LIMIT),
            after: position,
            cursor: after,
        })
    }
}

/// A client's text as a message repeats it: at most 64 characters.
fn shown(text: &str) -> String {
    text.chars().take(64).collect()
}

/// The body of `GET /requests`.
#[derive(Debug, Serialize)]
struct Shown<'a> {
    records: Vec<ShownOutcome<'a>>,
    /// Where the next page starts: passed back as `after`.
    next: String,
}

#[derive(Debug, Serialize)]
struct ShownOutcome<'a> {
    request_id: &'a str,
    index: u32,
    key: &'a str,
    interface: &'a str,
    state: &'static str,
    reason: Option<&'a str>,
    updated_at: String,
}

/// The answer to `GET /requests`, authenticated like the interfaces (D20, D47).
pub async fn answer(
    app: &App,
    method: &Method,
    query: &str,
    headers: &HeaderMap,
    request_id: &str,
) -> Response {
    let response = match page(app, method, query, headers).await {
        Ok(page) => {
            let body = Shown {
                records: page
                    .outcomes
                    .iter()
                    .map(|o| ShownOutcome {
                        request_id: &o.request_id,
                        index: o.index,
                        key: &o.key,
                        interface: path_of(&o.interface),
                        state: word(o.state),
                        reason: o.reason.as_deref(),
                        updated_at: rfc3339(o.at_ms),
                    })
                    .collect(),
                next: page.next.cursor(),
            };
            reply::json(StatusCode::OK, &body)
        }
        Err(e) => e.response(request_id),
    };
    super::receipts::counted(app, response, request_id)
}

async fn page(
    app: &App,
    method: &Method,
    query: &str,
    headers: &HeaderMap,
) -> Result<feed::Page, ApiError> {
    if method != Method::GET && method != Method::HEAD {
        return Err(ApiError::MethodNotAllowed(method.to_string(), "GET, HEAD"));
    }
    // Authenticated before the query is read: a stranger learns nothing from the 400s.
    let client = app
        .auth
        .get()
        .admit_following(headers, None)
        .await?
        .unwrap_or_default();
    let q = Query::parse(query)?;
    let store = std::sync::Arc::clone(&app.store);
    let found = tokio::task::spawn_blocking(move || {
        let request = feed::Request {
            client: &client,
            states: &q.states,
            interface: q.interface,
            after: q.after,
            limit: q.limit,
        };
        store.outcomes(&request).map(|p| p.ok_or(q.cursor))
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?;
    match found {
        Ok(Ok(page)) => Ok(page),
        // The other engine's cursor (a queue moved to PostgreSQL since).
        Ok(Err(cursor)) => Err(QueryError::Cursor(cursor.unwrap_or_default()).into()),
        Err(e) => Err(ApiError::Intake(IntakeError::Storage(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_names_its_states_interface_limit_and_cursor() {
        let q =
            Query::parse("state=rejected,quarantined&state=rejected&limit=500&after=s7").unwrap();
        assert_eq!(
            q.states,
            [ReceiptState::Rejected, ReceiptState::Quarantined]
        );
        assert_eq!((q.limit, q.after.map(|p| p.seq)), (500, Some(7)));
        let all = Query::parse("interface=%2Fvendor-data%2Fv1").unwrap();
        assert_eq!(all.states, STATES);
        assert_eq!(all.interface, Some("vendor-data-v1"));
        assert_eq!(all.limit, DEFAULT_LIMIT);
        assert_eq!(
            Query::parse("interface=vendor-data-v1").unwrap().interface,
            Some("vendor-data-v1")
        );
    }

    #[test]
    fn each_bad_query_names_its_parameter_and_rule() {
        let refused = |q: &str| Query::parse(q).unwrap_err().to_string();
        for (sent, bad) in [
            ("0", "0"),
            ("501", "501"),
            ("-1", "-1"),
            ("%2B5", "+5"),
            ("+5", " 5"),
            ("ten", "ten"),
            ("", ""),
            ("1e2", "1e2"),
        ] {
            assert_eq!(
                refused(&format!("limit={sent}")),
                format!("limit: {bad:?} is not a whole number from 1 to 500")
            );
        }
        assert!(refused("state=pending").starts_with("state: \"pending\" is not a state"));
        assert!(refused("state=").starts_with("state: \"\" is not a state"));
        assert!(refused("after=zzz").starts_with("after: \"zzz\" is not a cursor this feed gave"));
        assert!(refused("after=s1&after=s2").contains("after is given more than once"));
        assert!(refused("interface=/nope").starts_with("interface: no interface \"/nope\""));
        assert!(refused("sort=asc").starts_with("unknown query parameter \"sort\""));
    }
}
