//! Whether a body fits the schema the document declares for it: boon on the document itself
//! (OpenAPI 3.1 schemas are JSON Schema 2020-12), so a `$ref` resolves as a client's would.

use serde_json::Value;
use std::collections::HashMap;

/// Where the document is added as a resource.
const BASE: &str = "https://ap-intake.test/openapi.json";

/// The document's schemas, compiled as they are asked for.
pub struct Fit {
    compiler: boon::Compiler,
    schemas: boon::Schemas,
    compiled: HashMap<String, boon::SchemaIndex>,
}

impl Fit {
    pub fn new(doc: &Value) -> Self {
        let mut compiler = boon::Compiler::new();
        compiler.set_default_draft(boon::Draft::V2020_12);
        compiler.add_resource(BASE, doc.clone()).unwrap();
        Self {
            compiler,
            schemas: boon::Schemas::new(),
            compiled: HashMap::new(),
        }
    }

    /// Checks `value` against the schema at `reference` (`#/components/schemas/Result`).
    pub fn check(&mut self, reference: &str, value: &Value) -> Result<(), String> {
        let index = match self.compiled.get(reference) {
            Some(i) => *i,
            None => {
                let url = format!("{BASE}{reference}");
                let i = self
                    .compiler
                    .compile(&url, &mut self.schemas)
                    .map_err(|e| format!("{reference} does not compile: {e}"))?;
                self.compiled.insert(reference.to_string(), i);
                i
            }
        };
        self.schemas
            .validate(value, index)
            .map_err(|e| format!("{value} does not fit {reference}: {e:#}"))
    }

    /// Checks `value` against a media type's declared schema (a `$ref`).
    pub fn media(&mut self, media: &Value, value: &Value) -> Result<(), String> {
        let reference = media["schema"]["$ref"]
            .as_str()
            .ok_or_else(|| format!("{media}: the schema is no $ref"))?;
        self.check(reference, value)
    }
}
