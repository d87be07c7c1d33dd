//! `ap-intake key generate`: a new random API key and its `[[api_keys]]` block (D20), or an
//! OAuth 2.0 client secret and its `[[oauth2.clients]]` block; `key generate-signing`: the
//! key tokens are signed with (D47).

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

fn listed(interfaces: &[String]) -> String {
    if interfaces.is_empty() {
        "\"*\"".to_string()
    } else {
        interfaces
            .iter()
            .map(|i| format!("{i:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The text printed for the operator: the key once, then the block for the config file.
pub fn instructions(name: &str, interfaces: &[String], k: &GeneratedKey) -> String {
    let list = listed(interfaces);
    format!(
        "New API key for {name:?}. It is shown only this once: give it to the ERP now\n\
         (it sends it in the x-api-key header).\n\n    {key}\n\n\
         Add this block to the config file and reload the service (systemctl reload ap-intake):\n\n\
         [[api_keys]]\nname = {name:?}\nsha256 = \"{hash}\"\ninterfaces = [{list}]\n",
        key = k.key,
        hash = k.sha256
    )
}

/// The text printed for a new OAuth 2.0 client: its id and secret once, then its block.
pub fn client_instructions(client_id: &str, interfaces: &[String], k: &GeneratedKey) -> String {
    format!(
        "New OAuth 2.0 client {client_id:?}. The secret is shown only this once: give the ERP\n\
         its Client_Id and Client_Secret now, with the Access_Token_URL\n\
         https://<this service>/oauth2/token.\n\n    client_id:     {client_id}\n    \
         client_secret: {key}\n\n\
         Add this block to the config file (beside [oauth2]) and reload the service (systemctl reload ap-intake):\n\n\
         [[oauth2.clients]]\nclient_id = {client_id:?}\nsecret_sha256 = \"{hash}\"\n\
         interfaces = [{list}]\n",
        key = k.key,
        hash = k.sha256,
        list = listed(interfaces)
    )
}

/// Writes a new signing key to `file` (mode 0600), never over an existing file.
pub fn write_signing_key(file: &std::path::Path) -> Result<(), crate::oauth2::KeyError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let pem = crate::oauth2::keys::generate_pem()?;
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
        .and_then(|mut f| {
            f.write_all(pem.as_bytes())?;
            f.sync_all()
        });
    written.map_err(|source| crate::oauth2::KeyError::Write {
        path: file.display().to_string(),
        source,
    })
}

/// The text printed after `key generate-signing`.
pub fn signing_instructions(file: &std::path::Path) -> String {
    format!(
        "Wrote a new Ed25519 signing key to {path}. Give every node the same file (readable by\n\
         the ap-intake user only), then add to the config file:\n\n\
         [oauth2]\nsigning_key_file = {path:?}\n",
        path = file.display().to_string()
    )
}
