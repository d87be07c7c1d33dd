//! The answers of the intake paths (D1-D5, D26, D27) as OpenAPI components: one response per
//! status, with its body schema (`bodies.rs`), headers and examples. The example messages are
//! the service's own texts, taken from its error types where they are public.

use crate::budget::BudgetError;
use crate::http::auth::Denied;
use crate::http::reply::ApiError;
use crate::intake::CheckError;
use crate::validate::envelope::{EXPECTED_FORMAT, StructureError};
use serde_json::{Map, Value, json};
use std::time::Duration;

/// A request id as the service makes them (D4): a per-process prefix and a counter.
pub const ID: &str = "5f0c2a9e0000002a";

/// `#/components/responses/<name>`.
pub fn reference(name: &str) -> Value {
    json!({ "$ref": format!("#/components/responses/{name}") })
}

/// The response headers.
pub fn headers() -> Value {
    json!({
        "RequestId": {
            "description": "Every answer carries one (D4): the client's x-request-id when it \
                            is 1-64 letters, digits and -_.: characters, else a new one.",
            "schema": {"type": "string"}
        },
        "RetryAfter": {
            "description": "Seconds to wait before retrying.",
            "schema": {"type": "integer", "minimum": 1}
        },
        "Allow": {
            "description": "The methods the path takes: POST, or GET and HEAD for receipts \
                            and the console.",
            "schema": {"type": "string"}
        },
        "WWWAuthenticate": {
            "description": "How to authenticate (RFC 9110 section 15.5.2): the key in the \
                            x-api-key header.",
            "schema": {"type": "string", "example": crate::http::auth::API_KEY_CHALLENGE}
        }
    })
}

/// Every shared response, by component name.
pub fn responses() -> Map<String, Value> {
    [
        ("Accepted", accepted()),
        ("Partial", partial()),
        ("Invalid", invalid()),
        ("Unauthorized", unauthorized()),
        ("Forbidden", forbidden()),
        ("NotFound", not_found()),
        ("MethodNotAllowed", method_not_allowed()),
        ("Timeout", timeout()),
        ("TooLarge", too_large()),
        ("UnsupportedMediaType", unsupported_media_type()),
        ("RateLimited", rate_limited()),
        ("Internal", internal()),
        ("NotImplemented", not_implemented()),
        ("Unavailable", unavailable()),
    ]
    .into_iter()
    .map(|(name, response)| (name.to_string(), response))
    .collect()
}

/// A response: `description`, a body of the component `schema` with `examples` (name,
/// summary, value), and `headers` besides x-request-id.
pub fn response(
    description: &str,
    schema: &str,
    examples: &[(&str, &str, Value)],
    headers: &[&str],
) -> Value {
    let mut h = Map::new();
    for name in std::iter::once("x-request-id").chain(headers.iter().copied()) {
        let component = match name {
            "x-request-id" => "RequestId".to_string(),
            other => other.replace('-', ""),
        };
        h.insert(
            name.into(),
            json!({ "$ref": format!("#/components/headers/{component}") }),
        );
    }
    let examples: Map<String, Value> = examples
        .iter()
        .map(|(name, summary, value)| {
            let example = json!({"summary": summary, "value": value});
            (name.to_string(), example)
        })
        .collect();
    json!({
        "description": description,
        "headers": h,
        "content": {"application/json": {
            "schema": {"$ref": format!("#/components/schemas/{schema}")},
            "examples": examples
        }}
    })
}

/// A common body (D3).
pub fn result(status: &str, counts: [u64; 3], errors: Value, message: &str) -> Value {
    json!({
        "status": status, "total": counts[0], "succeeded": counts[1], "failed": counts[2],
        "errors": errors, "message": message, "request_id": ID
    })
}

/// A short failure body (D5).
pub fn failure(message: impl ToString) -> Value {
    json!({"status": "FAILED", "message": message.to_string(), "request_id": ID})
}

/// A 401/403 body (D4).
fn auth_failure(message: impl ToString) -> Value {
    json!({"status": "FAILED", "message": message.to_string()})
}

/// An error entry (D2).
fn entry(index: u64, path: &str, error: impl ToString) -> Value {
    json!({"index": index, "path": path, "error": error.to_string()})
}

fn accepted() -> Value {
    let body = result("SUCCESS", [2, 2, 0], json!([]), "2 record(s) queued");
    response(
        "Every record is valid and queued (D3), stored durably before this answer (D17).",
        "Result",
        &[("queued", "All records queued", body)],
        &[],
    )
}

/// The 207 body; `message` as the real path words it.
pub fn partial_body() -> Value {
    let errors = json!([entry(1, "/code", "required key [code] not found")]);
    let message = "1 record(s) queued, 1 record(s) failed validation";
    result("PARTIAL", [2, 1, 1], errors, message)
}

fn partial() -> Value {
    response(
        "Some records are valid: those are queued, the others listed in errors (D3). Never \
         for payment confirmations, which are all-or-nothing.",
        "Result",
        &[("partial", "One record queued, one failed", partial_body())],
        &[],
    )
}

fn invalid() -> Value {
    let records = json!([
        entry(0, "/code", "required key [code] not found"),
        entry(
            0,
            "/type",
            "instance value (\"GL\") not found in enum (possible values: \
             [\"DEDUCTABLE\",\"VAT\"])"
        )
    ]);
    let records = result(
        "FAILED",
        [1, 0, 1],
        records,
        "1 of 1 records failed validation",
    );
    let structure = |e: StructureError| {
        let mut body = result(
            "FAILED",
            [0, 0, 0],
            json!([entry(0, "", &e)]),
            &e.to_string(),
        );
        body["expected_format"] = json!(EXPECTED_FORMAT);
        body
    };
    let bad_date = "string \"2024-02-30\" is not a valid calendar date";
    let unreadable =
        ApiError::BodyRead("the gzip body cannot be decoded: invalid gzip header".into());
    let all_or_nothing = result(
        "FAILED",
        [0, 0, 0],
        json!([entry(0, "/payment_date", bad_date)]),
        "No items could be processed as the structure was invalid.",
    );
    response(
        "Nothing was queued (D3): no record is valid (total n, failed n); or the envelope \
         or the query is wrong (a structure failure: totals 0, one error at index 0, \
         expected_format); or a record of a payment confirmation is invalid (all-or-nothing: \
         totals 0, every violation listed). A request that could not be read (a body that \
         is not gzip or not UTF-8 JSON text, a malformed request head) gets the short failure \
         body.",
        "BadRequest",
        &[
            ("unreadable", "A body that is not gzip", failure(unreadable)),
            ("records", "No record valid", records),
            (
                "structure",
                "No envelope",
                structure(StructureError::MissingObjects),
            ),
            (
                "query",
                "accountingType missing (accounting objects)",
                structure(StructureError::MissingAccountingType),
            ),
            (
                "allOrNothing",
                "Payment confirmation with an invalid record",
                all_or_nothing,
            ),
        ],
        &[],
    )
}

fn unauthorized() -> Value {
    response(
        "The x-api-key header is missing or matches no configured key (D20), decided before \
         the body is read.",
        "AuthFailure",
        &[
            ("missing", "No key", auth_failure(Denied::Missing)),
            ("invalid", "Unknown key", auth_failure(Denied::Invalid)),
        ],
        &["WWW-Authenticate"],
    )
}

fn forbidden() -> Value {
    let denied = Denied::Forbidden {
        key: "erp-finance".into(),
        path: "/vendor-data/v1",
    };
    response(
        "The key may not use this interface (D20).",
        "AuthFailure",
        &[(
            "forbidden",
            "A key without this interface",
            auth_failure(denied),
        )],
        &[],
    )
}

fn not_found() -> Value {
    let wrong = ApiError::NotFound("/general-ledger-codes/v1/".into());
    response(
        "No such path: a misspelt path, or one with a trailing slash (D5).",
        "Failure",
        &[("notFound", "Trailing slash", failure(wrong))],
        &[],
    )
}

fn method_not_allowed() -> Value {
    let wrong = ApiError::MethodNotAllowed("GET".into(), "POST");
    response(
        "The path takes POST only (D5).",
        "Failure",
        &[("get", "GET on an interface", failure(wrong))],
        &["Allow"],
    )
}

fn timeout() -> Value {
    response(
        "The body did not arrive within [server] body_timeout_secs (D5, D26).",
        "Failure",
        &[(
            "timeout",
            "A body too slow",
            failure(ApiError::BodyTimeout(30)),
        )],
        &[],
    )
}

fn too_large() -> Value {
    let records = CheckError::TooManyRecords {
        count: 10_001,
        max: 10_000,
    };
    let budget = BudgetError::TooLarge {
        needed_mib: 300,
        budget_mib: 256,
    };
    response(
        "Nothing was queued: the body (after gzip decoding) is over [limits] max_body_bytes, \
         the batch over max_records, or processing it would need more than the whole memory \
         budget (D5, D27).",
        "Failure",
        &[
            (
                "body",
                "A body too large",
                failure(ApiError::BodyTooLarge(33_554_432)),
            ),
            ("records", "Too many records", failure(records)),
            ("budget", "More than the memory budget", failure(budget)),
        ],
        &[],
    )
}

fn unsupported_media_type() -> Value {
    response(
        "The body is not declared as UTF-8 JSON (Content-Type application/json in any case, \
         charset utf-8 if given), or has a content coding other than gzip or identity (D5, \
         D25).",
        "Failure",
        &[
            (
                "missing",
                "No Content-Type",
                failure("Content-Type is missing; send application/json"),
            ),
            (
                "charset",
                "Another charset",
                failure("only UTF-8 JSON is accepted (charset=iso-8859-1)"),
            ),
            (
                "coding",
                "Another content coding",
                failure("content encoding br is not supported (supported: gzip, identity)"),
            ),
        ],
        &[],
    )
}

fn rate_limited() -> Value {
    let limited = ApiError::Denied(Denied::RateLimited {
        key: "erp-finance".into(),
        retry_after: Duration::from_secs(1),
    });
    response(
        "The key's rate limit is exhausted (D5, D20).",
        "Failure",
        &[("rateLimited", "Rate limit", failure(limited))],
        &["Retry-After"],
    )
}

fn internal() -> Value {
    let unexpected = ApiError::Internal(String::new());
    response(
        "Unexpected; logged with the request id (D5).",
        "Failure",
        &[("internal", "Unexpected", failure(unexpected))],
        &[],
    )
}

fn not_implemented() -> Value {
    let message = "transfer encoding gzip is not supported (supported: chunked)";
    response(
        "A Transfer-Encoding other than chunked (D25).",
        "Failure",
        &[(
            "transferEncoding",
            "Another transfer coding",
            failure(message),
        )],
        &[],
    )
}

fn unavailable() -> Value {
    let storage = "the queue cannot store records right now; nothing was queued, retry later";
    response(
        "Nothing was queued: the queue cannot store records right now (disk full, storage \
         error; D5, D30), or request bodies fill the memory budget until this one's deadline \
         (D27). Retry after Retry-After seconds.",
        "Failure",
        &[
            ("storage", "Storage failure", failure(storage)),
            ("busy", "Memory budget full", failure(BudgetError::Busy)),
        ],
        &["Retry-After"],
    )
}
