//! The body schemas of the answers: the common body (D3), the short failure bodies (D4, D5)
//! and the receipt (D38). Every part is a component titled with its name, so that client
//! generators name their types after it (D38 addendum).

use serde_json::{Map, Value, json};

/// Every answer body's schema, by component name.
pub fn schemas() -> Map<String, Value> {
    let parts = [
        ("ErrorEntry", error_entry()),
        ("ResultStatus", result_status()),
        ("Result", result()),
        ("Failure", failure()),
        ("BadRequest", bad_request()),
        ("AuthFailure", auth_failure()),
        ("ReceiptState", receipt_state()),
        ("ReceiptRecord", receipt_record()),
        ("Receipt", receipt()),
    ];
    let parts = parts.into_iter().chain(super::feed::schemas());
    parts
        .into_iter()
        .map(|(name, mut schema)| {
            if let Some(obj) = schema.as_object_mut() {
                obj.shift_insert(0, "title".into(), json!(name));
            }
            (name.to_string(), schema)
        })
        .collect()
}

fn to(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn error_entry() -> Value {
    json!({
        "type": "object",
        "description": "One violation (D2): a record with three problems has three entries.",
        "required": ["index", "path", "error"],
        "properties": {
            "index": {
                "type": "integer", "minimum": 0,
                "description": "0-based position of the record in objects.object.record \
                                (D1); 0 for structure failures."
            },
            "path": {
                "type": "string",
                "description": "JSON Pointer of the offending value inside the record (\"\" \
                                for the record itself), or where a missing or unknown field \
                                is or would be."
            },
            "error": {"type": "string", "description": "The exact message (D2)."}
        }
    })
}

fn result() -> Value {
    json!({
        "type": "object",
        "description": "The common response body (D3, D4). Errors are ordered by index, then \
                        document order; at most 1,000, a final entry says how many were left \
                        out (D2).",
        "required": ["status", "total", "succeeded", "failed", "errors", "message",
                     "request_id"],
        "properties": {
            "status": to("ResultStatus"),
            "total": {"type": "integer", "minimum": 0},
            "succeeded": {"type": "integer", "minimum": 0},
            "failed": {"type": "integer", "minimum": 0,
                       "description": "Distinct failing records."},
            "errors": {"type": "array", "items": to("ErrorEntry")},
            "message": {"type": "string"},
            "expected_format": {
                "type": "string",
                "description": "Structure failures only: a short example of the envelope."
            },
            "request_id": {"type": "string"}
        }
    })
}

fn result_status() -> Value {
    json!({
        "type": "string",
        "enum": ["SUCCESS", "PARTIAL", "FAILED"],
        "description": "SUCCESS: every record queued (or valid, in a dry run); PARTIAL: some; \
                        FAILED: none."
    })
}

fn bad_request() -> Value {
    json!({
        "description": "The 400 body: the common body (records or structure invalid), or the \
                        short failure body when the request itself could not be read (a body \
                        that is not gzip or not UTF-8, a malformed request head).",
        "anyOf": [to("Result"), to("Failure")]
    })
}

fn failure() -> Value {
    json!({
        "type": "object",
        "description": "The short body of other failures (D5).",
        "required": ["status", "message", "request_id"],
        "properties": {
            "status": {"const": "FAILED"},
            "message": {"type": "string"},
            "request_id": {"type": "string"}
        }
    })
}

fn auth_failure() -> Value {
    json!({
        "type": "object",
        "description": "401 and 403 bodies are exactly status and message (D4); the request \
                        id is in the x-request-id header.",
        "required": ["status", "message"],
        "additionalProperties": false,
        "properties": {
            "status": {"const": "FAILED"},
            "message": {"type": "string"}
        }
    })
}

fn receipt_state() -> Value {
    json!({
        "type": "string",
        "enum": ["pending", "delivered", "rejected", "quarantined", "superseded"],
        "description": "superseded: a later request replaced it before delivery; rejected: \
                        refused by the platform, with its reason."
    })
}

fn receipt_record() -> Value {
    json!({
        "type": "object",
        "description": "What became of one record.",
        "required": ["index", "key", "state", "updated_at", "reason"],
        "properties": {
            "index": {"type": "integer", "minimum": 0,
                      "description": "The record's position in the request (D1)."},
            "key": {"type": "string", "description": "The record's queue key (D15)."},
            "state": to("ReceiptState"),
            "updated_at": {
                "type": ["string", "null"], "format": "date-time",
                "description": "When the record reached its state (UTC), where known."
            },
            "reason": {
                "type": ["string", "null"],
                "description": "Why it was rejected or quarantined."
            }
        }
    })
}

fn receipt() -> Value {
    json!({
        "type": "object",
        "description": "What became of each record a request had accepted (D38).",
        "required": ["request_id", "received_at", "interface", "records"],
        "properties": {
            "request_id": {"type": "string"},
            "received_at": {
                "type": "string", "format": "date-time",
                "description": "When the request was received (UTC)."
            },
            "interface": {"type": "string", "description": "The interface's path."},
            "records": {"type": "array", "items": to("ReceiptRecord")}
        }
    })
}
