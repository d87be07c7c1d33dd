//! TLS to the database with rustls: the system's trusted CAs plus `[storage.postgres]
//! ca_file` (D39).

use crate::StoreError;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// The connector for `sslmode` other than `disable`: the system's CAs and the configured ones.
pub(super) fn connector(
    system: &[u8],
    ca_pem: Option<&[u8]>,
) -> Result<tokio_postgres_rustls::MakeRustlsConnect, StoreError> {
    let mut roots = rustls::RootCertStore::empty();
    for pem in [system, ca_pem.unwrap_or_default()] {
        for cert in CertificateDer::pem_slice_iter(pem).flatten() {
            // A certificate the store cannot use is skipped, as a browser would.
            let _ = roots.add(cert);
        }
    }
    if roots.is_empty() {
        return Err(StoreError::Settings(
            "no CA certificates to check the database's TLS certificate: install the \
             system's CA bundle or set ca_file (or sslmode=disable)"
                .into(),
        ));
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Settings(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}
