//! The answers of the intake paths (D1-D5, D26, D27) as OpenAPI components: body schemas,
//! headers and one response per status, each with examples. The example messages are the
//! service's own texts, taken from its error types where they are public.

use crate::budget::BudgetError;
use crate::http::auth::Denied;
use crate::http::reply::ApiError;
use crate::intake::IntakeError;
use crate::validate::envelope::{EXPECTED_FORMAT, StructureError};
use serde_json::{Map, Value, json};
use std::time::Duration;

/// A request id as the service makes them (D4): a per-process prefix and a counter.
const ID: &str = "5f0c2a9e0000002a";

/// `#/components/responses/<name>`.
pub fn reference(name: &str) -> Value {
    json!({ "$ref": format!("#/components/responses/{name}") })
}

/// The body schemas shared by every interface.
pub fn schemas() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("ErrorEntry".into(), json!({
        "type": "object",
        "description": "One violation (D2): a record with three problems has three entries.",
        "required": ["index", "path", "error"],
        "properties": {
            "index": {"type": "integer", "minimum": 0,
                      "description": "0-based position of the record in objects.object.record (D1); 0 for structure failures."},
            "path": {"type": "string",
                     "description": "JSON Pointer of the offending value inside the record (\"\" for the record itself), or of the missing or unknown field."},
            "error": {"type": "string", "description": "The exact message (decisions table)."}
        }
    }));
    m.insert("Result".into(), json!({
        "type": "object",
        "description": "The common response body (D3, D4). Entries are ordered by index, then document order; at most 1,000, a final entry says how many were left out.",
        "required": ["status", "total", "succeeded", "failed", "errors", "message", "request_id"],
        "properties": {
            "status": {"type": "string", "enum": ["SUCCESS", "PARTIAL", "FAILED"]},
            "total": {"type": "integer", "minimum": 0},
            "succeeded": {"type": "integer", "minimum": 0},
            "failed": {"type": "integer", "minimum": 0, "description": "Distinct failing records."},
            "errors": {"type": "array", "items": {"$ref": "#/components/schemas/ErrorEntry"}},
            "message": {"type": "string"},
            "expected_format": {"type": "string",
                                "description": "Structure failures only: a short example of the envelope."},
            "request_id": {"type": "string"}
        }
    }));
    m.insert(
        "Failure".into(),
        json!({
            "type": "object",
            "description": "The short body of other failures (D5).",
            "required": ["status", "message", "request_id"],
            "properties": {
                "status": {"const": "FAILED"},
                "message": {"type": "string"},
                "request_id": {"type": "string"}
            }
        }),
    );
    m.insert("AuthFailure".into(), json!({
        "type": "object",
        "description": "401 and 403 bodies are exactly status and message (D4); the request id is in the x-request-id header.",
        "required": ["status", "message"],
        "additionalProperties": false,
        "properties": {
            "status": {"const": "FAILED"},
            "message": {"type": "string"}
        }
    }));
    m
}

/// The response headers.
pub fn headers() -> Value {
    json!({
        "RequestId": {
            "description": "Every answer carries one (D4): the client's x-request-id when it is 1-64 characters of letters, digits and -_.:, else a new one.",
            "schema": {"type": "string"}
        },
        "RetryAfter": {
            "description": "Seconds to wait before retrying.",
            "schema": {"type": "integer", "minimum": 1}
        },
        "Allow": {
            "description": "The method the path takes: POST, or GET for receipts.",
            "schema": {"type": "string"}
        }
    })
}

/// Every response, by component name.
pub fn responses() -> Map<String, Value> {
    let mut m = Map::new();
    for (name, response) in [
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
    ] {
        m.insert(name.into(), response);
    }
    m
}

/// A response: `description`, a body of `schema` with named `examples`, and `headers` besides
/// x-request-id.
pub fn response(description: &str, schema: &str, examples: Value, headers: &[&str]) -> Value {
    let mut h = Map::new();
    h.insert(
        "x-request-id".into(),
        json!({"$ref": "#/components/headers/RequestId"}),
    );
    for name in headers {
        let component = name.replace('-', "");
        h.insert(
            (*name).into(),
            json!({ "$ref": format!("#/components/headers/{component}") }),
        );
    }
    json!({
        "description": description,
        "headers": h,
        "content": {"application/json": {
            "schema": {"$ref": format!("#/components/schemas/{schema}")},
            "examples": examples
        }}
    })
}

/// A named example.
pub fn example(summary: &str, value: Value) -> Value {
    json!({"summary": summary, "value": value})
}

/// A Result body.
pub fn result(status: &str, counts: [u64; 3], errors: Value, message: &str) -> Value {
    json!({
        "status": status, "total": counts[0], "succeeded": counts[1], "failed": counts[2],
        "errors": errors, "message": message, "request_id": ID
    })
}

/// A Failure body.
pub fn failure(message: impl ToString) -> Value {
    json!({"status": "FAILED", "message": message.to_string(), "request_id": ID})
}

fn auth_failure(message: impl ToString) -> Value {
    json!({"status": "FAILED", "message": message.to_string()})
}

fn accepted() -> Value {
    let body = result("SUCCESS", [2, 2, 0], json!([]), "2 record(s) queued");
    response(
        "Every record is valid and queued (D3): stored durably before this answer (D17).",
        "Result",
        json!({"queued": example("All records queued", body)}),
        &[],
    )
}

fn partial() -> Value {
    let errors = json!([{"index": 1, "path": "/code", "error": "required key [code] not found"}]);
    let body = result(
        "PARTIAL",
        [2, 1, 1],
        errors,
        "1 record(s) queued, 1 record(s) failed validation",
    );
    response(
        "Some records are valid: those are queued, the others listed in errors (D3). Not for payment confirmations, which are all-or-nothing.",
        "Result",
        json!({"partial": example("One record queued, one failed", body)}),
        &[],
    )
}

fn invalid() -> Value {
    let record = json!([
        {"index": 0, "path": "/code", "error": "required key [code] not found"},
        {"index": 0, "path": "/type", "error": "instance value (\"GL\") not found in enum (possible values: [\"DEDUCTABLE\",\"VAT\"])"}
    ]);
    let mut structure = result(
        "FAILED",
        [0, 0, 0],
        json!([{"index": 0, "path": "", "error": StructureError::MissingObjects.to_string()}]),
        &StructureError::MissingObjects.to_string(),
    );
    structure["expected_format"] = json!(EXPECTED_FORMAT);
    let mut query = structure.clone();
    let missing = StructureError::MissingAccountingType.to_string();
    query["errors"] = json!([{"index": 0, "path": "", "error": missing}]);
    query["message"] = json!(missing);
    let all_or_nothing = result(
        "FAILED",
        [0, 0, 0],
        json!([{"index": 0, "path": "/payment_date", "error": "string \"2024-02-30\" is not a valid calendar date"}]),
        "No items could be processed as the structure was invalid.",
    );
    response(
        "Nothing was queued: no record is valid (total n, failed n), or the envelope or query is wrong (a structure failure: totals 0, one error at index 0, expected_format), or any record of a payment confirmation is invalid (all-or-nothing, totals 0) (D3). A body that could not be read gets the short body.",
        "Result",
        json!({
            "records": example("No record valid", result("FAILED", [1, 0, 1], record, "1 of 1 records failed validation")),
            "structure": example("Envelope missing", structure),
            "query": example("accountingType missing (accounting objects)", query),
            "allOrNothing": example("Payment confirmation with an invalid record", all_or_nothing)
        }),
        &[],
    )
}

fn unauthorized() -> Value {
    response(
        "The x-api-key header is missing or matches no configured key (D20). Decided before the body is read.",
        "AuthFailure",
        json!({
            "missing": example("No key", auth_failure(Denied::Missing)),
            "invalid": example("Unknown key", auth_failure(Denied::Invalid))
        }),
        &[],
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
        json!({"forbidden": example("Key without this interface", auth_failure(denied))}),
        &[],
    )
}

fn not_found() -> Value {
    let path = "/general-ledger-codes/v1/";
    response(
        "No such path: a misspelt path, or one with a trailing slash (D5).",
        "Failure",
        json!({"notFound": example("Trailing slash", failure(ApiError::NotFound(path.into())))}),
        &[],
    )
}

fn method_not_allowed() -> Value {
    response(
        "The path takes POST only (D5).",
        "Failure",
        json!({"get": example("GET on an interface", failure(ApiError::MethodNotAllowed("GET".into(), "POST")))}),
        &["Allow"],
    )
}

fn timeout() -> Value {
    response(
        "The body did not arrive within [server] body_timeout_secs (D5, D26).",
        "Failure",
        json!({"timeout": example("Body too slow", failure(ApiError::BodyTimeout(30)))}),
        &[],
    )
}

fn too_large() -> Value {
    let records = IntakeError::TooManyRecords {
        count: 10_001,
        max: 10_000,
    };
    let budget = BudgetError::TooLarge {
        needed_mib: 300,
        budget_mib: 256,
    };
    response(
        "The body (after gzip decoding) is over [limits] max_body_bytes, the batch over max_records, or processing it would need more than the whole memory budget (D5, D27). Nothing was queued.",
        "Failure",
        json!({
            "body": example("Body too large", failure(ApiError::BodyTooLarge(33_554_432))),
            "records": example("Too many records", failure(records)),
            "budget": example("More than the memory budget", failure(budget))
        }),
        &[],
    )
}

fn unsupported_media_type() -> Value {
    response(
        "The body is not declared as UTF-8 JSON (Content-Type application/json, any case, charset utf-8 if given) or has a content coding other than gzip or identity (D5, D25).",
        "Failure",
        json!({
            "missing": example("No Content-Type", failure("Content-Type is missing; send application/json")),
            "charset": example("Another charset", failure("only UTF-8 JSON is accepted (charset=iso-8859-1)")),
            "coding": example("Another content coding", failure("content encoding br is not supported (supported: gzip, identity)"))
        }),
        &[],
    )
}

fn rate_limited() -> Value {
    let denied = ApiError::Denied(Denied::RateLimited {
        key: "erp-finance".into(),
        retry_after: Duration::from_secs(1),
    });
    response(
        "The key's rate limit is exhausted (D5, D20).",
        "Failure",
        json!({"rateLimited": example("Rate limit", failure(denied))}),
        &["Retry-After"],
    )
}

fn internal() -> Value {
    response(
        "Unexpected; logged with the request id (D5).",
        "Failure",
        json!({"internal": example("Unexpected", failure(ApiError::Internal(String::new())))}),
        &[],
    )
}

fn not_implemented() -> Value {
    response(
        "A Transfer-Encoding other than chunked (D25).",
        "Failure",
        json!({"transferEncoding": example("Unknown transfer coding", failure("transfer encoding gzip is not supported (supported: chunked)"))}),
        &[],
    )
}

fn unavailable() -> Value {
    response(
        "Nothing was queued: the queue cannot store records right now (disk full, storage error; D5, D30), or the bodies in flight fill the memory budget until the body deadline (D27). Retry after Retry-After.",
        "Failure",
        json!({
            "storage": example("Storage failure", failure("the queue cannot store records right now; nothing was queued, retry later")),
            "busy": example("Memory budget full", failure(BudgetError::Busy))
        }),
        &["Retry-After"],
    )
}
