//! Realistic records with unique keys: the full fixture of an interface with its primary-key
//! field replaced. Bodies are built by string substitution so the generator spends little CPU
//! on the machine it shares with the service.

use ap_intake::interfaces::{Interface, KeyPart};
use serde_json::Value;

const MARK: &str = "@@KEY@@";

/// The interface's full fixture (`tests/fixtures/*.full.json`): a record with every field.
pub fn fixture(iface: &Interface) -> Value {
    let stem = iface.schema.trim_end_matches(".json");
    let path = format!(
        "{}/tests/fixtures/{stem}.full.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).expect("fixture JSON")
}

/// Builds request bodies for one interface.
pub struct Records {
    /// The record as JSON text with the key field's value replaced by a marker.
    template: String,
    /// Distinguishes runs that share a data directory.
    run: String,
}

impl Records {
    pub fn new(iface: &Interface) -> Self {
        let mut record = fixture(iface);
        let field = iface
            .key
            .iter()
            .rev()
            .find_map(|k| match k {
                KeyPart::Field(f) if *f != "organization" => Some(*f),
                _ => None,
            })
            .expect("a key field");
        record[field] = Value::String(MARK.into());
        let mut seed = [0u8; 4];
        getrandom::fill(&mut seed).expect("randomness");
        Self {
            template: record.to_string(),
            run: hex::encode(seed),
        }
    }

    /// One request body of `n` records, keys unique per (`client`, `seq`, position).
    pub fn body(&self, client: usize, seq: u64, n: usize) -> Vec<u8> {
        let mut out = String::with_capacity(32 + n * (self.template.len() + 16));
        out.push_str(r#"{"objects":{"object":{"record":["#);
        for i in 0..n {
            if i > 0 {
                out.push(',');
            }
            let key = format!("{}-{client}-{seq}-{i}", self.run);
            out.push_str(&self.template.replace(MARK, &key));
        }
        out.push_str("]}}}");
        out.into_bytes()
    }
}
