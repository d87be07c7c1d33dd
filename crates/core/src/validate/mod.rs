//! Validation of records against their interface's JSON Schema (D14), with the rules JSON
//! Schema cannot say checked in code ([`formats`]) and the exact messages of the decisions
//! table ([`messages`]).

pub mod cost;
pub mod envelope;
pub mod fast;
pub mod formats;
pub mod json;
pub mod messages;
pub mod numbers;
pub mod written;

use crate::interfaces::{INTERFACES, Interface, builtin_schema};
use crate::shape::Shape;
use messages::{Context, Step, Violation, from_boon, sort_in_document_order, xml_unsafe};
use serde_json::Value;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A schema that could not be loaded; start-up stops with it.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// An override file exists but cannot be read.
    #[error("cannot read schema {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A schema is not JSON.
    #[error("schema {name} is not valid JSON: {source}")]
    Json {
        /// The file (or built-in name).
        name: String,
        /// Why.
        source: serde_json::Error,
    },
    /// The binary has no built-in schema of that name (a row of `INTERFACES` without its file).
    #[error("no built-in schema {0}")]
    Missing(String),
    /// A schema is not a valid draft-07 schema.
    #[error("schema {name} does not compile: {message}")]
    Compile {
        /// The file (or built-in name).
        name: String,
        /// boon's explanation.
        message: String,
    },
}

struct Compiled {
    /// boon's form of the schema, for the reference path. Every schema is compiled at start,
    /// so that a bad one stops start-up; where the fast path has a plan, that form is then
    /// dropped and built again for the first record the plan passes on, since it is about
    /// 1 MiB for the nine built-in schemas and most intakes never need it (BENCHMARKS.md,
    /// "Idle memory at start"). Compiling is deterministic: what compiled at start compiles
    /// again.
    reference: OnceLock<Result<Reference, SchemaError>>,
    /// The schema's file name (the interface table's).
    schema: &'static str,
    shape: Shape,
    /// The same schema as a plan for the fast path, when it uses only what a plan can say.
    fast: Option<fast::Plan>,
    /// The schema document, for the original texts of its keywords.
    json: Value,
    origin: Option<PathBuf>,
}

/// The compiled schemas of all interfaces. Compiled once at start-up; shared by all requests.
pub struct Validator {
    compiled: Vec<Compiled>,
}

impl Validator {
    /// Compiles every interface's schema: the built-in one, or the file of the same name in
    /// `schema_dir` when there is one (D14).
    pub fn load(schema_dir: Option<&Path>) -> Result<Self, SchemaError> {
        let compiled = INTERFACES
            .iter()
            .map(|iface| compile(iface, schema_dir))
            .collect::<Result<_, _>>()?;
        Ok(Self { compiled })
    }

    /// The compiled schema of an interface of the table (`None` for any other: it is never
    /// checked against some other interface's schema).
    fn get(&self, iface: &Interface) -> Option<&Compiled> {
        let i = INTERFACES.iter().position(|x| x.id == iface.id)?;
        self.compiled.get(i)
    }

    /// Every violation of one record, in document order (D2). Empty when the record is valid.
    pub fn check(&self, iface: &Interface, record: &Value) -> Vec<Violation> {
        let Some(c) = self.get(iface) else {
            return vec![Violation::new(
                Vec::new(),
                format!("interface {} has no schema loaded", iface.id),
            )];
        };
        let mut numbers = Vec::new();
        numbers::check(&c.shape, record, &mut numbers);
        let reference = match c.reference() {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(interface = iface.id, error = %e, "the reference validator is missing");
                return vec![Violation::new(Vec::new(), e.to_string())];
            }
        };
        let mut out = Vec::new();
        if let Err(e) = reference.schemas.validate(record, reference.index) {
            let numbers_judged: HashSet<&[Step]> =
                numbers.iter().map(|v| v.steps.as_slice()).collect();
            let cx = Context {
                record,
                schema: &c.json,
                numbers_judged: &numbers_judged,
            };
            from_boon(&e, &cx, &mut out);
        }
        out.append(&mut numbers);
        xml_unsafe(record, &mut out);
        sort_in_document_order(record, &mut out);
        out
    }

    /// Whether the fast path can show `record` valid: by the interface's [`fast::Plan`], the
    /// number rules and the XML-unsafe characters, exactly the verdict [`Self::check`] gives
    /// a valid record. `false` means "ask [`Self::check`]", never "invalid".
    pub fn fast_accepts(&self, iface: &Interface, record: &fast::Node<'_>) -> bool {
        let Some(c) = self.get(iface) else {
            return false;
        };
        let Some(plan) = &c.fast else {
            return false;
        };
        if !plan.accepts(record) {
            return false;
        }
        let mut out = Vec::new();
        numbers::check(&c.shape, record, &mut out);
        xml_unsafe(record, &mut out);
        out.is_empty()
    }

    /// Whether an interface's schema has a plan for the fast path.
    pub fn has_fast_path(&self, iface: &Interface) -> bool {
        self.get(iface).is_some_and(|c| c.fast.is_some())
    }

    /// The XML shape of an interface's records (`None` for an interface not in the table).
    pub fn shape(&self, iface: &Interface) -> Option<&Shape> {
        self.get(iface).map(|c| &c.shape)
    }

    /// The schema document of an interface as loaded (built-in or override).
    pub fn schema_json(&self, iface: &Interface) -> Option<&Value> {
        self.get(iface).map(|c| &c.json)
    }

    /// The override file an interface's schema came from, if not the built-in one.
    pub fn origin(&self, iface: &Interface) -> Option<&Path> {
        self.get(iface).and_then(|c| c.origin.as_deref())
    }
}

fn compile(iface: &Interface, dir: Option<&Path>) -> Result<Compiled, SchemaError> {
    let file = dir.map(|d| d.join(iface.schema)).filter(|p| p.is_file());
    let text = match &file {
        Some(path) => std::fs::read_to_string(path).map_err(|source| SchemaError::Read {
            path: path.clone(),
            source,
        })?,
        None => builtin_schema(iface.schema)
            .ok_or_else(|| SchemaError::Missing(iface.schema.to_string()))?
            .to_string(),
    };
    let json: Value = serde_json::from_str(&text).map_err(|source| SchemaError::Json {
        name: schema_name(iface.schema, file.as_deref()),
        source,
    })?;
    let reference = Reference::compile(&json, iface.schema, file.as_deref())?;
    let fast = fast::Plan::compile(&json);
    let reference = if fast.is_some() {
        OnceLock::new()
    } else {
        // Every record of this interface takes the reference path.
        OnceLock::from(Ok(reference))
    };
    Ok(Compiled {
        reference,
        schema: iface.schema,
        shape: Shape::from_schema(&json),
        fast,
        json,
        origin: file,
    })
}

/// The name errors give a schema: its override file, or `(built-in) NAME`.
fn schema_name(schema: &str, origin: Option<&Path>) -> String {
    match origin {
        Some(path) => path.display().to_string(),
        None => format!("(built-in) {schema}"),
    }
}

impl Compiled {
    /// boon's form of the schema, compiled on first use.
    fn reference(&self) -> Result<&Reference, &SchemaError> {
        self.reference
            .get_or_init(|| Reference::compile(&self.json, self.schema, self.origin.as_deref()))
            .as_ref()
    }
}

/// A schema as boon compiled it.
struct Reference {
    schemas: boon::Schemas,
    index: boon::SchemaIndex,
}

impl Reference {
    fn compile(json: &Value, schema: &str, origin: Option<&Path>) -> Result<Self, SchemaError> {
        let url = format!("urn:ap-intake:schema:{schema}");
        let mut compiler = boon::Compiler::new();
        compiler.set_default_draft(boon::Draft::V7);
        for f in formats::all() {
            compiler.register_format(f);
        }
        let err = |e: &dyn std::fmt::Display| SchemaError::Compile {
            name: schema_name(schema, origin),
            message: e.to_string(),
        };
        compiler
            .add_resource(&url, json.clone())
            .map_err(|e| err(&e))?;
        let mut schemas = boon::Schemas::new();
        let index = compiler.compile(&url, &mut schemas).map_err(|e| err(&e))?;
        Ok(Self { schemas, index })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failing test should stop loudly")]
    use super::*;
    use serde_json::json;

    fn gl() -> &'static Interface {
        INTERFACES
            .iter()
            .find(|i| i.id == "general-ledger-codes-v1")
            .unwrap()
    }

    #[test]
    fn a_schema_with_a_plan_gets_its_reference_form_on_first_use() {
        let v = Validator::load(None).unwrap();
        let c = v.get(gl()).unwrap();
        assert!(c.fast.is_some());
        assert!(
            c.reference.get().is_none(),
            "dropped after the start-up compile"
        );
        let record = json!({"code": "4000", "type": "PAYABLE", "description_en": "x"});
        let violations = v.check(gl(), &record);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0].message.contains("PAYABLE"), "{violations:?}");
        assert!(c.reference.get().is_some_and(Result::is_ok));
    }

    #[test]
    fn a_schema_without_a_plan_keeps_its_reference_form_from_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let mut schema: Value =
            serde_json::from_str(builtin_schema("general-ledger-codes.json").unwrap()).unwrap();
        // `not` is nothing a plan can say, so every record takes the reference path.
        schema["properties"]["code"]["not"] = json!({"const": "0000"});
        std::fs::write(
            dir.path().join("general-ledger-codes.json"),
            schema.to_string(),
        )
        .unwrap();
        let v = Validator::load(Some(dir.path())).unwrap();
        let c = v.get(gl()).unwrap();
        assert!(c.fast.is_none());
        assert!(c.reference.get().is_some_and(Result::is_ok));
        let record = json!({"code": "0000", "type": "VAT", "description_en": "x"});
        assert_eq!(v.check(gl(), &record).len(), 1);
    }

    #[test]
    fn a_schema_that_does_not_compile_stops_the_load() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("general-ledger-codes.json"),
            r#"{"type": "object", "properties": {"code": {"type": "strin"}}}"#,
        )
        .unwrap();
        let err = Validator::load(Some(dir.path())).err().unwrap();
        assert!(
            matches!(&err, SchemaError::Compile { name, .. } if name.ends_with("general-ledger-codes.json")),
            "{err}"
        );
    }
}
