//! The rustls server configuration: TLS 1.2 and 1.3 only, ALPN h2 and http/1.1, the ring
//! provider only (a second provider in the tree makes rustls refuse to pick one), and optional
//! mutual TLS against a client CA (D20).

use crate::config::{ClientAuth, Tls};
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use std::path::Path;
use std::sync::Arc;

/// A TLS setting that cannot be used; names the config key.
#[derive(Debug, thiserror::Error)]
#[error("server.tls.{key}: {message}")]
pub struct TlsError {
    /// `cert`, `key` or `client_ca`.
    pub key: &'static str,
    /// What is wrong.
    pub message: String,
}

fn err(key: &'static str, message: impl Into<String>) -> TlsError {
    TlsError {
        key,
        message: message.into(),
    }
}

fn certs(path: &Path, key: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(key, format!("cannot read {}: {e}", path.display())))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(key, format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(err(
            key,
            format!("{} holds no PEM certificate", path.display()),
        ));
    }
    Ok(certs)
}

/// The server configuration for `tls`, with its files read and checked.
pub fn server_config(tls: &Tls) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certs(&tls.cert, "cert")?;
    let key = PrivateKeyDer::from_pem_file(&tls.key).map_err(|e| {
        err(
            "key",
            format!(
                "cannot read a PEM private key from {}: {e}",
                tls.key.display()
            ),
        )
    })?;
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| err("cert", e.to_string()))?;
    let builder = match &tls.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in certs(ca, "client_ca")? {
                roots
                    .add(c)
                    .map_err(|e| err("client_ca", format!("{}: {e}", ca.display())))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match tls.client_auth {
                ClientAuth::Required => verifier,
                ClientAuth::Optional => verifier.allow_unauthenticated(),
            };
            let verifier = verifier
                .build()
                .map_err(|e| err("client_ca", e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| err("key", format!("does not fit the certificate: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
