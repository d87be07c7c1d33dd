//! The operations: the nine interfaces (and their alias paths), their dry runs under
//! `/validate/`, and the receipts under `/requests/` (D38).

use super::responses::{example, failure, reference, response};
use crate::http::reply::ApiError;
use crate::interfaces::{Interface, Mode};
use serde_json::{Map, Value, json};

/// What every operation of the document shares.
pub struct Context {
    /// No key needed (D21): no 401, 403 or 429.
    pub sandbox: bool,
}

/// The POST operation of an interface at one of its paths; `alias` names the main path when
/// this is an alias (D12).
pub fn intake(iface: &Interface, record: &Value, alias: Option<&str>, cx: &Context) -> Value {
    let title = summary(iface, record);
    let mut parts = vec![
        record_description(record),
        format!(
            "Each record is validated against the interface's JSON Schema as loaded by this \
             service (override files included, D14); valid records are queued under their key \
             and delivered to the platform, a later record with the same key replacing a \
             pending one (D15, D16). {}",
            mode_text(iface.mode)
        ),
    ];
    if iface.needs_accounting_type {
        parts.push("The accountingType query parameter is required.".into());
    }
    if let Some(main) = alias {
        parts.push(format!("An alias of `{main}`: the same interface."));
    }
    parts.retain(|p| !p.is_empty());
    let description = parts.join("\n\n");
    let id = match alias {
        Some(_) => format!("{}-alias", iface.id),
        None => iface.id.to_string(),
    };
    let mut op = json!({
        "tags": ["Intake"],
        "operationId": id,
        "summary": title,
        "description": description,
        "parameters": parameters(iface),
        "requestBody": {"$ref": format!("#/components/requestBodies/{}", name(iface))},
        "responses": statuses(iface, "202", "Accepted", cx),
    });
    if alias.is_some() {
        op["summary"] = json!(format!("{title} (alias path)"));
    }
    op
}

/// `POST /validate/<path>`: the same request, nothing queued.
pub fn validate(iface: &Interface, record: &Value, cx: &Context) -> Value {
    let valid = super::responses::result(
        "SUCCESS",
        [2, 2, 0],
        json!([]),
        "2 record(s) valid, none queued",
    );
    let ok = response(
        "Every record is valid; nothing was queued.",
        "Result",
        json!({"valid": example("All records valid", valid)}),
        &[],
    );
    let mut responses = statuses(iface, "200", "Accepted", cx);
    responses["200"] = ok;
    json!({
        "tags": ["Dry run"],
        "operationId": format!("validate-{}", iface.id),
        "summary": format!("Validate only: {}", summary(iface, record)),
        "description": format!(
            "A dry run of `POST {}`: the same query, headers, key, limits and validation, and \
             the same answer, except that nothing is queued and an all-valid request gets 200 \
             (message `<n> record(s) valid, none queued`) instead of 202 (D38).",
            iface.path
        ),
        "parameters": parameters(iface),
        "requestBody": {"$ref": format!("#/components/requestBodies/{}", name(iface))},
        "responses": responses,
    })
}

/// `GET /requests/{request_id}`: the receipt of an earlier request.
pub fn receipt(cx: &Context) -> Value {
    let receipt = json!({
        "request_id": "5f0c2a9e0000002a",
        "received_at": "2024-09-30T08:15:02Z",
        "interface": "/general-ledger-codes/v1",
        "records": [
            {"index": 0, "key": "gl-code:main/4000", "state": "delivered",
             "updated_at": "2024-09-30T08:15:04Z", "reason": null},
            {"index": 1, "key": "gl-code:main/4010", "state": "pending",
             "updated_at": "2024-09-30T08:15:02Z", "reason": null}
        ]
    });
    let ok = json!({
        "description": "The receipt: what became of each record the request had accepted.",
        "headers": {"x-request-id": {"$ref": "#/components/headers/RequestId"}},
        "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/Receipt"},
            "examples": {"receipt": example("Two records", receipt)}
        }}
    });
    let unknown = response(
        "No receipt: an unknown or expired request id, or a request another key sent.",
        "Failure",
        json!({"unknown": example("Unknown request", failure(ApiError::NoReceipt("5f0c2a9e0000002b".into())))}),
        &[],
    );
    let wrong_method = response(
        "The path takes GET only.",
        "Failure",
        json!({"post": example("POST on a receipt", failure(ApiError::MethodNotAllowed("POST".into(), "GET")))}),
        &["Allow"],
    );
    let mut responses = Map::new();
    responses.insert("200".into(), ok);
    responses.insert("404".into(), unknown);
    responses.insert("405".into(), wrong_method);
    if !cx.sandbox {
        responses.insert("401".into(), reference("Unauthorized"));
        responses.insert("429".into(), reference("RateLimited"));
    }
    responses.insert("500".into(), reference("Internal"));
    json!({
        "tags": ["Receipts"],
        "operationId": "request-receipt",
        "summary": "What became of the records of an earlier request",
        "description": "With the key that sent the request (D38). Kept for [receipts] retention_days (default 7).",
        "parameters": [{
            "name": "request_id", "in": "path", "required": true,
            "description": "The x-request-id of the request's answer.",
            "schema": {"type": "string"}
        }],
        "responses": responses,
    })
}

/// The receipt's body schema.
pub fn receipt_schema() -> Value {
    json!({
        "type": "object",
        "required": ["request_id", "received_at", "interface", "records"],
        "properties": {
            "request_id": {"type": "string"},
            "received_at": {"type": "string", "format": "date-time"},
            "interface": {"type": "string", "description": "The interface the request was sent to."},
            "records": {"type": "array", "items": {
                "type": "object",
                "required": ["index", "key", "state"],
                "properties": {
                    "index": {"type": "integer", "minimum": 0,
                              "description": "Position of the record in the request (D1)."},
                    "key": {"type": "string", "description": "The record's queue key (D15)."},
                    "state": {"type": "string",
                              "enum": ["pending", "delivered", "rejected", "quarantined", "superseded"],
                              "description": "superseded: a later request replaced it before delivery; rejected: with the platform's reason."},
                    "updated_at": {"type": "string", "format": "date-time"},
                    "reason": {"type": ["string", "null"]}
                }
            }}
        }
    })
}

/// The component name stem of an interface: `general-ledger-codes-v1` -> `GeneralLedgerCodesV1`.
pub fn name(iface: &Interface) -> String {
    iface
        .id
        .split('-')
        .map(|part| {
            let mut chars = part.chars();
            match chars.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

/// The responses of an interface operation; `ok` is the all-valid status.
fn statuses(iface: &Interface, ok: &str, ok_response: &str, cx: &Context) -> Value {
    let mut m = Map::new();
    m.insert(ok.into(), reference(ok_response));
    let mut codes = vec![("400", "Invalid")];
    if iface.mode == Mode::PerRecord {
        codes.insert(0, ("207", "Partial"));
    }
    if !cx.sandbox {
        codes.extend([("401", "Unauthorized"), ("403", "Forbidden")]);
    }
    codes.extend([
        ("404", "NotFound"),
        ("405", "MethodNotAllowed"),
        ("408", "Timeout"),
        ("413", "TooLarge"),
        ("415", "UnsupportedMediaType"),
    ]);
    if !cx.sandbox {
        codes.push(("429", "RateLimited"));
    }
    codes.extend([
        ("500", "Internal"),
        ("501", "NotImplemented"),
        ("503", "Unavailable"),
    ]);
    for (code, component) in codes {
        m.insert(code.into(), reference(component));
    }
    Value::Object(m)
}

fn parameters(iface: &Interface) -> Value {
    let mut p = Vec::new();
    if iface.needs_accounting_type {
        p.push(json!({"$ref": "#/components/parameters/AccountingType"}));
    }
    p.push(json!({"$ref": "#/components/parameters/RequestId"}));
    Value::Array(p)
}

fn summary(iface: &Interface, record: &Value) -> String {
    let title = record
        .get("title")
        .and_then(Value::as_str)
        .unwrap_or(iface.id);
    // The built-in titles end in "(POST <path>)", which the console shows anyway.
    match title.find(" (POST ") {
        Some(at) => title[..at].to_string(),
        None => title.to_string(),
    }
}

fn record_description(record: &Value) -> String {
    record
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn mode_text(mode: Mode) -> &'static str {
    match mode {
        Mode::PerRecord => {
            "Records stand alone: valid ones are queued even when others fail (207)."
        }
        Mode::AllOrNothing => {
            "All or nothing: any invalid record fails the whole request and nothing is queued \
             (400, D3)."
        }
    }
}
