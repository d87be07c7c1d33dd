//! `GET /requests` (D48): the outcome feed, its parameters, its page and its refusals.

use super::paths::Context;
use super::responses::{ID, failure, reference, response};
use crate::http::feed::{DEFAULT_LIMIT, MAX_LIMIT, QueryError};
use crate::http::reply::ApiError;
use serde_json::{Map, Value, json};

/// The schemas of a page: `OutcomeState`, `Outcome` and `OutcomePage`.
pub fn schemas() -> Vec<(&'static str, Value)> {
    let state = json!({
        "type": "string",
        "enum": ["rejected", "quarantined", "delivered", "superseded"],
        "description": "What became of a record. A rejected record may be listed again: \
                        dropped by an operator (the reason says so), or delivered after an \
                        operator requeued it."
    });
    let outcome = json!({
        "type": "object",
        "description": "One change of a record's state (D48).",
        "required": ["request_id", "index", "key", "interface", "state", "reason", "updated_at"],
        "properties": {
            "request_id": {"type": "string",
                           "description": "The request that sent the record (its receipt)."},
            "index": {"type": "integer", "minimum": 0,
                      "description": "The record's position in that request (D1)."},
            "key": {"type": "string", "description": "The record's queue key (D15)."},
            "interface": {"type": "string", "description": "The interface's path."},
            "state": {"$ref": "#/components/schemas/OutcomeState"},
            "reason": {"type": ["string", "null"],
                       "description": "Why it was rejected or quarantined."},
            "updated_at": {"type": "string", "format": "date-time",
                           "description": "When the change happened (UTC)."}
        }
    });
    let page = json!({
        "type": "object",
        "description": "A page of the feed, oldest change first, and where the next starts.",
        "required": ["records", "next"],
        "properties": {
            "records": {"type": "array", "items": {"$ref": "#/components/schemas/Outcome"}},
            "next": {
                "type": "string",
                "description": "Pass it back as `after`; it comes with every page, an empty \
                                one included, which is the end of the feed for now."
            }
        }
    });
    vec![
        ("OutcomeState", state),
        ("Outcome", outcome),
        ("OutcomePage", page),
    ]
}

/// The operation.
pub fn operation(cx: &Context) -> Value {
    let example = json!({
        "records": [
            {"request_id": ID, "index": 1, "key": "gl-code:main/4010",
             "interface": "/general-ledger-codes/v1", "state": "rejected",
             "reason": "HTTP 422: unknown cost centre",
             "updated_at": "2024-09-30T08:15:04.120Z"},
            {"request_id": ID, "index": 0, "key": "gl-code:main/4000",
             "interface": "/general-ledger-codes/v1", "state": "delivered", "reason": null,
             "updated_at": "2024-09-30T08:15:04.131Z"}
        ],
        "next": "s1027"
    });
    let end = json!({"records": [], "next": "s1027"});
    let mut m = Map::new();
    m.insert(
        "200".into(),
        response(
            "A page of the caller's outcomes.",
            "OutcomePage",
            &[
                ("page", "Two changes", example),
                ("end", "The end of the feed for now", end),
            ],
            &[],
        ),
    );
    let refusals: Vec<(&str, &str, Value)> = [
        (
            "limit",
            "A limit out of range",
            QueryError::Limit("0".into()),
        ),
        (
            "after",
            "A cursor the feed did not give",
            QueryError::Cursor("x1".into()),
        ),
        (
            "state",
            "A state the feed does not list",
            QueryError::State("pending".into()),
        ),
    ]
    .into_iter()
    .map(|(name, summary, e)| (name, summary, failure(ApiError::FeedQuery(e))))
    .collect();
    m.insert(
        "400".into(),
        response(
            "A parameter the feed cannot take: the message names it and the rule.",
            "Failure",
            &refusals,
            &[],
        ),
    );
    if !cx.sandbox {
        m.insert("401".into(), reference("Unauthorized"));
    }
    let post = ApiError::MethodNotAllowed("POST".into(), "GET, HEAD");
    m.insert(
        "405".into(),
        response(
            "The path takes GET and HEAD only.",
            "Failure",
            &[("post", "POST on the feed", failure(post))],
            &["Allow"],
        ),
    );
    if !cx.sandbox {
        m.insert("429".into(), reference("RateLimited"));
    }
    m.insert("500".into(), reference("Internal"));
    m.insert("503".into(), reference("Unavailable"));
    json!({
        "tags": ["Receipts"],
        "operationId": "outcome-feed",
        "summary": "What became of the caller's records, change by change",
        "description": "The records of the caller's own requests (its API key or OAuth \
                        client) whose state changed, oldest change first (D48). Poll it from \
                        the `next` of the last page: a cursor never skips or repeats a \
                        change, also across restarts and on PostgreSQL. Kept as long as the \
                        receipts ([receipts] retention_days).",
        "parameters": [
            {"name": "state", "in": "query", "required": false, "style": "form",
             "explode": false,
             "description": "The states to list, comma-separated; all four when absent.",
             "schema": {"type": "array",
                        "items": {"$ref": "#/components/schemas/OutcomeState"}}},
            {"name": "interface", "in": "query", "required": false,
             "description": "Only this interface's records (its path).",
             "schema": {"type": "string"}, "example": "/general-ledger-codes/v1"},
            {"name": "limit", "in": "query", "required": false,
             "description": "The most records a page lists.",
             "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                        "default": DEFAULT_LIMIT}},
            {"name": "after", "in": "query", "required": false,
             "description": "The `next` of an earlier page; from the oldest change when \
                             absent.",
             "schema": {"type": "string"}}
        ],
        "responses": m,
    })
}
