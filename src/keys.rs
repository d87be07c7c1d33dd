//! `ap-intake key generate`: a new random API key and its `[[api_keys]]` block (D20).

use sha2::{Digest, Sha256};

/// A freshly generated key and the SHA-256 the config stores.
pub struct GeneratedKey {
    /// The key, shown once.
    pub key: String,
    /// Hex SHA-256 of the key.
    pub sha256: String,
}

/// Hex SHA-256 of a presented key, as configured in `[[api_keys]] sha256`.
pub fn sha256_hex(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// A new key of 256 random bits from the operating system.
pub fn generate() -> Result<GeneratedKey, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    let key = format!("apk_{}", hex::encode(bytes));
    Ok(GeneratedKey {
        sha256: sha256_hex(&key),
        key,
    })
}

/// The text printed for the operator: the key once, then the block for the config file.
pub fn instructions(name: &str, interfaces: &[String], k: &GeneratedKey) -> String {
    let list = if interfaces.is_empty() {
        "\"*\"".to_string()
    } else {
        interfaces
            .iter()
            .map(|i| format!("{i:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "New API key for {name:?}. It is shown only this once: give it to the ERP now\n\
         (it sends it in the x-api-key header).\n\n    {key}\n\n\
         Add this block to the config file and restart the service:\n\n\
         [[api_keys]]\nname = {name:?}\nsha256 = \"{hash}\"\ninterfaces = [{list}]\n",
        key = k.key,
        hash = k.sha256
    )
}
