//! The operations: the nine interfaces at their paths (alias paths included, D12), their dry
//! runs under `/validate/`, and the receipts under `/requests/` (D38).

use super::responses::{ID, failure, partial_body, reference, response, result};
use crate::http::reply::ApiError;
use crate::interfaces::{Interface, Mode};
use serde_json::{Map, Value, json};

/// What every operation of the document shares.
pub struct Context {
    /// No key needed (D21): no 401, 403 or 429.
    pub sandbox: bool,
}

/// One path of an interface: its own, or an alias of it.
pub struct At<'a> {
    /// The interface.
    pub iface: &'a Interface,
    /// Its record schema as loaded (for the title and description).
    pub record: &'a Value,
    /// The path.
    pub path: &'a str,
}

impl At<'_> {
    fn is_alias(&self) -> bool {
        self.path != self.iface.path
    }

    /// The operation id, unique in the document.
    fn id(&self) -> String {
        match self.iface.aliases.iter().position(|a| *a == self.path) {
            Some(0) => format!("{}-alias", self.iface.id),
            Some(n) => format!("{}-alias-{}", self.iface.id, n + 1),
            None => self.iface.id.to_string(),
        }
    }

    /// The record schema's title, without the "(POST <path>)" the console shows anyway.
    fn title(&self) -> String {
        let title = self.record.get("title").and_then(Value::as_str);
        let title = title.unwrap_or(self.iface.id);
        let title = title.find(" (POST ").map_or(title, |at| &title[..at]);
        if self.is_alias() {
            format!("{title} (alias path)")
        } else {
            title.to_string()
        }
    }
}

/// `POST <path>`: the interface.
pub fn intake(at: &At<'_>, cx: &Context) -> Value {
    let mut parts = vec![
        at.record
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        format!(
            "Each record is validated against the interface's JSON Schema as loaded by this \
             service (override files included, D14). Valid records are queued under their key \
             and delivered to the platform; a later record with the same key replaces a \
             pending one (D15, D16). {}",
            mode_text(at.iface.mode)
        ),
    ];
    if at.iface.needs_accounting_type {
        parts.push("The accountingType query parameter is required.".into());
    }
    if at.is_alias() {
        parts.push(format!("An alias of `{}`.", at.iface.path));
    }
    parts.retain(|p| !p.is_empty());
    json!({
        "tags": ["Intake"],
        "operationId": at.id(),
        "summary": at.title(),
        "description": parts.join("\n\n"),
        "parameters": parameters(at.iface),
        "requestBody": request_body(at.iface),
        "responses": statuses(at.iface, cx),
    })
}

/// `POST /validate<path>`: the same request, nothing queued.
pub fn validate(at: &At<'_>, cx: &Context) -> Value {
    let valid = result(
        "SUCCESS",
        [2, 2, 0],
        json!([]),
        "2 record(s) valid, none queued",
    );
    let mut responses = statuses(at.iface, cx);
    if let Some(m) = responses.as_object_mut() {
        m.shift_remove("202");
        m.insert(
            "200".into(),
            response(
                "Every record is valid; nothing was queued.",
                "Result",
                &[("valid", "All records valid", valid)],
                &[],
            ),
        );
        m.sort_keys();
    }
    if at.iface.mode == Mode::PerRecord {
        responses["207"] = response(
            "Some records are valid. The body is the real path's, whose message counts the \
             valid records as queued; nothing was queued.",
            "Result",
            &[("partial", "One record valid, one not", partial_body())],
            &[],
        );
    }
    json!({
        "tags": ["Dry run"],
        "operationId": format!("validate-{}", at.id()),
        "summary": format!("Validate only: {}", at.title()),
        "description": format!(
            "A dry run of `POST {}`: the same query, headers, key, limits and checks, and the \
             same answer, except that nothing is queued and an all-valid request gets 200 \
             (message `<n> record(s) valid, none queued`) instead of 202 (D38).",
            at.path
        ),
        "parameters": parameters(at.iface),
        "requestBody": request_body(at.iface),
        "responses": responses,
    })
}

/// `GET /requests/{request_id}`: the receipt of an earlier request.
pub fn receipt(cx: &Context) -> Value {
    let record = |index: u64, code: &str, state: &str, at: &str| {
        let key = format!("gl-code:main/{code}");
        json!({"index": index, "key": key, "state": state, "updated_at": at, "reason": null})
    };
    let receipt = json!({
        "request_id": ID,
        "received_at": "2024-09-30T08:15:02.417Z",
        "interface": "/general-ledger-codes/v1",
        "records": [
            record(0, "4000", "delivered", "2024-09-30T08:15:04.120Z"),
            record(1, "4010", "pending", "2024-09-30T08:15:02.417Z")
        ]
    });
    let mut m = Map::new();
    let ok = response(
        "The receipt: what became of each record the request had accepted.",
        "Receipt",
        &[("receipt", "Two records", receipt)],
        &[],
    );
    m.insert("200".into(), ok);
    if !cx.sandbox {
        m.insert("401".into(), reference("Unauthorized"));
    }
    let unknown = ApiError::NoReceipt(format!("{}b", &ID[..ID.len() - 1]));
    let unknown = response(
        "No receipt: an unknown or expired request id, or a request another key sent.",
        "Failure",
        &[("unknown", "Unknown request", failure(unknown))],
        &[],
    );
    m.insert("404".into(), unknown);
    let post = ApiError::MethodNotAllowed("POST".into(), "GET");
    let wrong = response(
        "The path takes GET only.",
        "Failure",
        &[("post", "POST on a receipt", failure(post))],
        &["Allow"],
    );
    m.insert("405".into(), wrong);
    if !cx.sandbox {
        m.insert("429".into(), reference("RateLimited"));
    }
    m.insert("500".into(), reference("Internal"));
    m.insert("503".into(), reference("Unavailable"));
    json!({
        "tags": ["Receipts"],
        "operationId": "request-receipt",
        "summary": "What became of the records of an earlier request",
        "description": "With the key that sent the request (D38). Receipts are kept for \
                        [receipts] retention_days (default 7).",
        "parameters": [{
            "name": "request_id", "in": "path", "required": true,
            "description": "The x-request-id of the request's answer.",
            "schema": {"type": "string"}
        }],
        "responses": m,
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

/// The answers of an interface path, by status.
fn statuses(iface: &Interface, cx: &Context) -> Value {
    let mut codes = vec![("202", "Accepted")];
    if iface.mode == Mode::PerRecord {
        codes.push(("207", "Partial"));
    }
    codes.push(("400", "Invalid"));
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
    let m: Map<String, Value> = codes
        .into_iter()
        .map(|(code, component)| (code.to_string(), reference(component)))
        .collect();
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

fn request_body(iface: &Interface) -> Value {
    json!({"$ref": format!("#/components/requestBodies/{}", name(iface))})
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
