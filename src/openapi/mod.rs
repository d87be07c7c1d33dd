//! The OpenAPI 3.1 document of the intake listener (D38), generated at start-up from the
//! schemas actually loaded, so an override of a schema file shows in it (D14).
//!
//! - `record.rs`: a record's draft-07 schema as an OpenAPI 3.1 (JSON Schema 2020-12) schema;
//! - `bodies.rs`, `responses.rs`: the answers of D1-D5, D26, D27 and D38, with their body
//!   schemas and examples;
//! - `parts.rs`: the record cut into named components, for client generators;
//! - `paths.rs`: the operations (interfaces, alias paths, dry runs, receipts).
//!
//! Each interface's request body is the envelope `{"objects":{"object":{"record":[...]}}}`
//! around its record schema, each level a component (`<Stem>Request`, `<Stem>Objects`,
//! `<Stem>Object`); its example holds the records of the schema's `examples`.

mod bodies;
mod feed;
mod parts;
mod paths;
mod record;
mod responses;
mod security;

pub use security::Security;

use crate::interfaces::{INTERFACES, Interface};
use crate::validate::Validator;
use paths::{At, Context};
use serde_json::{Map, Value, json};

/// The document served at `GET /openapi.json`: `accounting_types` are the values the
/// `accountingType` query parameter takes; `security` what authenticates a request (none in
/// sandbox, D21).
pub fn document(validator: &Validator, accounting_types: &[String], security: Security) -> Value {
    let cx = Context {
        sandbox: security.sandbox,
    };
    let mut path_items = Map::new();
    let mut schemas = bodies::schemas();
    schemas.insert("AccountingType".into(), accounting_type(accounting_types));
    for iface in &INTERFACES {
        schemas.extend(envelope(&paths::name(iface)));
    }
    let mut taken = parts::names(&schemas);
    let mut request_bodies = Map::new();
    for iface in &INTERFACES {
        let loaded = validator
            .schema_json(iface)
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"}));
        let stem = paths::name(iface);
        let converted = record::convert(&loaded, &stem);
        let cut = parts::split(&stem, converted.record, converted.definitions, &mut taken);
        schemas.extend(cut);
        request_bodies.insert(stem.clone(), request_body(iface, &stem, &loaded));
        for path in std::iter::once(iface.path).chain(iface.aliases.iter().copied()) {
            let at = At {
                iface,
                record: &loaded,
                path,
            };
            path_items.insert(path.into(), json!({"post": paths::intake(&at, &cx)}));
            path_items.insert(
                format!("/validate{path}"),
                json!({"post": paths::validate(&at, &cx)}),
            );
        }
    }
    path_items.insert(
        "/requests/{request_id}".into(),
        json!({"get": paths::receipt(&cx)}),
    );
    path_items.insert("/requests".into(), json!({"get": feed::operation(&cx)}));

    let mut components = json!({
        "schemas": schemas,
        "requestBodies": request_bodies,
        "responses": responses::responses(),
        "headers": responses::headers(),
        "parameters": parameters(accounting_types),
    });
    let mut doc = json!({
        "openapi": "3.1.0",
        "info": info(security.sandbox),
        // Relative: the appliance as the client reached it (its address, or its reverse
        // proxy's), which the console's requests then go to; linters want servers declared.
        "servers": [{
            "url": ".",
            "description": "This appliance: the address this document was fetched from."
        }],
        "tags": [
            {"name": "Intake",
             "description": "The nine interfaces: records validated, queued, delivered."},
            {"name": "Dry run",
             "description": "The same requests, validated only: nothing is queued."},
            {"name": "Receipts",
             "description": "What became of a request's records, and of all the caller's."}
        ],
        "paths": path_items,
    });
    let (schemes, required) = security::schemes(security);
    if !security.sandbox {
        components["securitySchemes"] = schemes;
    }
    doc["security"] = required;
    doc["components"] = components;
    drop_unused_components(&mut doc);
    doc
}

/// Removes the components nothing reaches from the paths: in sandbox (D21) the answers only a
/// key brings (401, 403, 429) and their parts. Linters (redocly, spectral) flag unused ones.
fn drop_unused_components(doc: &mut Value) {
    fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    out.push(r);
                }
                m.values().for_each(|v| refs(v, out));
            }
            Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }
    let mut wanted = Vec::new();
    if let Some(m) = doc.as_object() {
        m.iter()
            .filter(|(k, _)| k.as_str() != "components")
            .for_each(|(_, v)| refs(v, &mut wanted));
    }
    let mut reached: std::collections::HashSet<String> = std::collections::HashSet::new();
    while let Some(r) = wanted.pop() {
        if reached.insert(r.to_string())
            && let Some(part) = doc.pointer(r.trim_start_matches('#'))
        {
            refs(part, &mut wanted);
        }
    }
    let Some(components) = doc.get_mut("components").and_then(Value::as_object_mut) else {
        return;
    };
    for (kind, parts) in components.iter_mut() {
        if kind == "securitySchemes" {
            continue; // named by `security`, not by $ref
        }
        if let Some(parts) = parts.as_object_mut() {
            parts.retain(|name, _| reached.contains(&format!("#/components/{kind}/{name}")));
        }
    }
}

fn info(sandbox: bool) -> Value {
    let mut description = String::from(
        "ERP systems POST accounts-payable records here; each is validated against its \
         interface's JSON Schema, queued durably and delivered to the AP platform. Bodies are \
         UTF-8 JSON, optionally gzip-encoded (Content-Encoding: gzip). Every answer carries an \
         x-request-id header.",
    );
    if sandbox {
        description.push_str(
            "\n\n**Sandbox** (D21): no API key is needed and nothing is delivered to a platform; \
             records are kept by the built-in sandbox sink.",
        );
    }
    json!({
        "title": "ap-intake",
        "version": env!("CARGO_PKG_VERSION"),
        "description": description,
        "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        "contact": {"name": "The administrators of this appliance"}
    })
}

/// The configured accounting object types, one component for every path that takes them.
fn accounting_type(accounting_types: &[String]) -> Value {
    json!({
        "title": "AccountingType",
        "type": "string",
        "enum": accounting_types,
        "description": "An accounting object type: one of [accounting_objects] types."
    })
}

/// The shared parameters: `accountingType`, of the configured types.
fn parameters(accounting_types: &[String]) -> Value {
    let mut accounting_type = json!({
        "name": "accountingType", "in": "query", "required": true,
        "description": "The accounting object type: one of [accounting_objects] types.",
        "schema": {"$ref": "#/components/schemas/AccountingType"}
    });
    if let Some(first) = accounting_types.first() {
        accounting_type["example"] = json!(first);
    }
    json!({
        "AccountingType": accounting_type,
        "RequestId": {
            "name": "x-request-id", "in": "header", "required": false,
            "description": "Your own request id, echoed in the answer (D4): 1-64 letters, \
                            digits and -_.: characters.",
            "schema": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,64}$"}
        }
    })
}

/// `{"objects":{"object":{"record":[<record>]}}}`, a component for each level.
fn envelope(stem: &str) -> [(String, Value); 3] {
    let level = |name: String, field: &str, inner: Value, description: String| {
        let mut properties = Map::new();
        properties.insert(field.into(), inner);
        let schema = json!({
            "title": name, "description": description, "type": "object",
            "required": [field], "properties": properties
        });
        (name, schema)
    };
    let to = |name: &str| json!({"$ref": format!("#/components/schemas/{stem}{name}")});
    let records = json!({"type": "array", "minItems": 1, "items": to("Record")});
    [
        level(
            format!("{stem}Request"),
            "objects",
            to("Objects"),
            format!("The request body: the envelope around {stem}Record records."),
        ),
        level(
            format!("{stem}Objects"),
            "object",
            to("Object"),
            "The envelope's second level.".into(),
        ),
        level(
            format!("{stem}Object"),
            "record",
            records,
            "The envelope's third level: the records, one or more.".into(),
        ),
    ]
}

/// The request body of an interface, with the records of its schema's `examples`.
fn request_body(iface: &Interface, stem: &str, loaded: &Value) -> Value {
    let mut media = json!({"schema": {"$ref": format!("#/components/schemas/{stem}Request")}});
    let records = record::examples(loaded);
    if !records.is_empty() {
        media["example"] = json!({"objects": {"object": {"record": records}}});
    }
    json!({
        "required": true,
        "description": format!("Records for {}: one or more, in the envelope.", iface.path),
        "content": {"application/json": media}
    })
}
