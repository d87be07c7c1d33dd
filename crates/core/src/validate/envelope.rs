//! The common envelope `objects.object.record[]` and the request's query (D3 structure
//! failures). A structure failure rejects the whole request: 400 with one error at index 0.

use super::json::{self, Duplicate, ReadError};
use super::messages::{Step, Violation};
use serde_json::Value;

/// A short example of the envelope, sent as `expected_format` with every structure failure.
pub const EXPECTED_FORMAT: &str = r#"{"objects":{"object":{"record":[{...},{...}]}}}"#;

/// Why a request's structure was refused before any record was looked at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StructureError {
    /// The body does not parse as JSON.
    #[error("request body is not valid JSON: {0}")]
    NotJson(String),
    /// The body is not UTF-8 (D25): the offset of the first bad byte.
    #[error("request body is not valid UTF-8 (byte {0})")]
    NotUtf8(usize),
    /// Arrays and objects nested deeper than the limit (D27): serde_json's position.
    #[error("{0}")]
    TooDeep(String),
    /// A key repeated in the envelope (D24).
    #[error("duplicate key [{key}] is not permitted")]
    DuplicateKey {
        /// The key.
        key: String,
        /// JSON Pointer of the second occurrence.
        path: String,
    },
    /// The body is not an object with an `objects` object (a flat record, an array, ...).
    #[error("The request is missing the objects section.")]
    MissingObjects,
    /// `objects.object` is missing or not an object.
    #[error("object has missing required properties ([\"object\"])")]
    MissingObject,
    /// `objects.object.record` is missing.
    #[error("object has missing required properties ([\"record\"])")]
    MissingRecord,
    /// `objects.object.record` is not an array, or is empty.
    #[error("record must be a non-empty array")]
    RecordNotArray,
    /// `/accounting-objects/v1` without `?accountingType=`.
    #[error("required query parameter [accountingType] not found")]
    MissingAccountingType,
    /// A query parameter the interface does not have (D38).
    #[error("unknown query parameter [{0}]")]
    UnknownQueryParameter(String),
    /// `accountingType` is not one of the configured types.
    #[error("instance value ({value}) not found in enum (possible values: {allowed})")]
    UnknownAccountingType {
        /// The value as JSON text.
        value: String,
        /// The configured types as a JSON array.
        allowed: String,
    },
}

impl StructureError {
    /// JSON Pointer into the request body of what is wrong (`""` for the body itself).
    pub fn path(&self) -> &str {
        match self {
            Self::NotJson(_) | Self::NotUtf8(_) | Self::TooDeep(_) | Self::MissingObjects => "",
            Self::DuplicateKey { path, .. } => path,
            Self::MissingObject => "/objects/object",
            Self::MissingRecord | Self::RecordNotArray => "/objects/object/record",
            Self::MissingAccountingType
            | Self::UnknownAccountingType { .. }
            | Self::UnknownQueryParameter(_) => "",
        }
    }
}

/// The records of a request body, in order, with the duplicate keys found inside them.
pub fn records(body: &[u8]) -> Result<(Vec<Value>, Vec<Duplicate>), StructureError> {
    let doc = json::read(body).map_err(|e| match e {
        ReadError::NotUtf8(at) => StructureError::NotUtf8(at),
        ReadError::NotJson(m) => StructureError::NotJson(m),
        ReadError::TooDeep(m) => StructureError::TooDeep(m),
        ReadError::EnvelopeDuplicate(steps) => {
            let key = match steps.last() {
                Some(Step::Key(k)) => k.clone(),
                _ => String::new(),
            };
            StructureError::DuplicateKey {
                key,
                path: Violation::new(steps, "").pointer(),
            }
        }
    })?;
    let mut root = doc.root;
    let objects = match root.get_mut("objects") {
        Some(o @ Value::Object(_)) => o,
        _ => return Err(StructureError::MissingObjects),
    };
    let object = match objects.get_mut("object") {
        Some(o @ Value::Object(_)) => o,
        _ => return Err(StructureError::MissingObject),
    };
    match object.get_mut("record") {
        None => Err(StructureError::MissingRecord),
        Some(Value::Array(records)) if !records.is_empty() => {
            Ok((std::mem::take(records), doc.duplicates))
        }
        Some(_) => Err(StructureError::RecordNotArray),
    }
}

/// Query parameter names are echoed in a message up to this many characters.
const MAX_SHOWN_NAME: usize = 64;

/// Refuses the first query parameter not in `known` (D38).
pub fn known_query_parameters(query: Option<&str>, known: &[&str]) -> Result<(), StructureError> {
    let params = form_urlencoded::parse(query.unwrap_or("").as_bytes());
    match params
        .map(|(k, _)| k)
        .find(|k| !known.contains(&k.as_ref()))
    {
        None => Ok(()),
        Some(name) => Err(StructureError::UnknownQueryParameter(
            name.chars().take(MAX_SHOWN_NAME).collect(),
        )),
    }
}

/// The `accountingType` of an accounting-objects request, checked against the configured
/// types (case-sensitive, like every value).
pub fn accounting_type(
    query: Option<&str>,
    configured: &[String],
) -> Result<String, StructureError> {
    let value = form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .find(|(k, _)| k == "accountingType")
        .map(|(_, v)| v.into_owned())
        .ok_or(StructureError::MissingAccountingType)?;
    if configured.contains(&value) {
        return Ok(value);
    }
    Err(StructureError::UnknownAccountingType {
        value: super::messages::render_str(&value),
        allowed: serde_json::to_string(configured).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_failures() {
        use StructureError::*;
        let r = |s: &str| records(s.as_bytes()).err();
        assert!(matches!(r("{"), Some(NotJson(m)) if m.contains("line 1 column 1")));
        assert_eq!(r(r#"{"code":"1"}"#), Some(MissingObjects));
        assert_eq!(r(r#"[1]"#), Some(MissingObjects));
        assert_eq!(r(r#"{"objects":[]}"#), Some(MissingObjects));
        assert_eq!(r(r#"{"objects":{}}"#), Some(MissingObject));
        assert_eq!(r(r#"{"objects":{"object":[]}}"#), Some(MissingObject));
        assert_eq!(r(r#"{"objects":{"object":{}}}"#), Some(MissingRecord));
        assert_eq!(
            r(r#"{"objects":{"object":{"record":[]}}}"#),
            Some(RecordNotArray)
        );
        assert_eq!(
            r(r#"{"objects":{"object":{"record":{}}}}"#),
            Some(RecordNotArray)
        );
        assert_eq!(
            records(br#"{"objects":{"object":{"record":[{"a":1},2]}}}"#).map(|r| r.0.len()),
            Ok(2)
        );
        assert_eq!(
            r(r#"{"objects":{"object":{"record":[{}]},"object":{}}}"#),
            Some(DuplicateKey {
                key: "object".into(),
                path: "/objects/object".into()
            })
        );
    }

    #[test]
    fn accounting_type_from_the_query() {
        let types = vec!["COSTCENTRE".to_string(), "PROJECT".to_string()];
        assert_eq!(
            accounting_type(Some("x=1&accountingType=PROJECT"), &types),
            Ok("PROJECT".to_string())
        );
        assert_eq!(
            accounting_type(None, &types),
            Err(StructureError::MissingAccountingType)
        );
        let err = accounting_type(Some("accountingType=costcentre"), &types).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"instance value ("costcentre") not found in enum (possible values: ["COSTCENTRE","PROJECT"])"#
        );
        assert_eq!(
            accounting_type(Some("accountingType=COST%43ENTRE"), &types),
            Ok("COSTCENTRE".to_string())
        );
    }
}
