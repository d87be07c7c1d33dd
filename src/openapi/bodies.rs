//! The body schemas of the answers: the common body (D3), the short failure bodies (D4, D5)
//! and the receipt (D38).

use serde_json::{Map, Value, json};

/// Every answer body's schema, by component name.
pub fn schemas() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("ErrorEntry".into(), error_entry());
    m.insert("Result".into(), result());
    m.insert("Failure".into(), failure());
    m.insert("AuthFailure".into(), auth_failure());
    m.insert("Receipt".into(), receipt());
    m
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
            "status": {"type": "string", "enum": ["SUCCESS", "PARTIAL", "FAILED"]},
            "total": {"type": "integer", "minimum": 0},
            "succeeded": {"type": "integer", "minimum": 0},
            "failed": {"type": "integer", "minimum": 0,
                       "description": "Distinct failing records."},
            "errors": {"type": "array", "items": {"$ref": "#/components/schemas/ErrorEntry"}},
            "message": {"type": "string"},
            "expected_format": {
                "type": "string",
                "description": "Structure failures only: a short example of the envelope."
            },
            "request_id": {"type": "string"}
        }
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

fn receipt() -> Value {
    let time = |what: &str| json!({"type": "string", "format": "date-time", "description": what});
    let record = json!({
        "type": "object",
        "required": ["index", "key", "state", "updated_at", "reason"],
        "properties": {
            "index": {"type": "integer", "minimum": 0,
                      "description": "The record's position in the request (D1)."},
            "key": {"type": "string", "description": "The record's queue key (D15)."},
            "state": {
                "type": "string",
                "enum": ["pending", "delivered", "rejected", "quarantined", "superseded"],
                "description": "superseded: a later request replaced it before delivery; \
                                rejected: refused by the platform, with its reason."
            },
            "updated_at": {
                "type": ["string", "null"], "format": "date-time",
                "description": "When the record reached its state (UTC), where known."
            },
            "reason": {
                "type": ["string", "null"],
                "description": "Why it was rejected or quarantined."
            }
        }
    });
    json!({
        "type": "object",
        "description": "What became of each record a request had accepted (D38).",
        "required": ["request_id", "received_at", "interface", "records"],
        "properties": {
            "request_id": {"type": "string"},
            "received_at": time("When the request was received (UTC)."),
            "interface": {"type": "string", "description": "The interface's path."},
            "records": {"type": "array", "items": record}
        }
    })
}
