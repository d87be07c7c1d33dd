//! `[platform]` keys that reach a platform behind a corporate network (D33): a private CA,
//! a client certificate, a proxy, OAuth2 client credentials. Files are read and parsed here,
//! so `check-config` names the key of a file that is missing or not PEM.

use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};

use super::KeyError;

/// `[platform.oauth2]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOAuth2 {
    token_url: String,
    client_id: String,
    client_secret_file: PathBuf,
    scope: Option<String>,
}

/// How ap-intake reaches the platform beyond its URL.
#[derive(Clone, Default)]
pub struct Network {
    /// Extra trusted CA certificates (PEM), beside the operating system's.
    pub ca_pem: Option<Vec<u8>>,
    /// Client certificate chain and private key (PEM), for mutual TLS.
    pub client_pem: Option<(Vec<u8>, Vec<u8>)>,
    /// An HTTP(S) proxy URL; without it the `https_proxy`/`no_proxy` environment applies.
    pub proxy: Option<String>,
    /// OAuth2 client credentials, instead of a bearer token or basic auth.
    pub oauth2: Option<OAuth2>,
}

/// OAuth2 client credentials (RFC 6749 4.4).
#[derive(Clone)]
pub struct OAuth2 {
    /// Where tokens come from.
    pub token_url: String,
    /// The client id.
    pub client_id: String,
    /// The client secret, read from `client_secret_file`.
    pub client_secret: String,
    /// The scope asked for, if any.
    pub scope: Option<String>,
}

impl fmt::Debug for Network {
    // Never print secrets or keys.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Network")
            .field("ca_file", &self.ca_pem.is_some())
            .field("client_cert", &self.client_pem.is_some())
            .field("proxy", &self.proxy)
            .field(
                "oauth2",
                &self.oauth2.as_ref().map(|o| (&o.token_url, &o.client_id)),
            )
            .finish()
    }
}

fn read(path: &Path, key: &'static str) -> Result<Vec<u8>, KeyError> {
    std::fs::read(path).map_err(|e| (key, format!("cannot read {}: {e}", path.display())))
}

/// What a PEM file holds: certificates and private keys.
fn pem_items(pem: &[u8], path: &Path, key: &'static str) -> Result<(usize, usize), KeyError> {
    let (mut certs, mut keys) = (0, 0);
    for item in ureq::tls::parse_pem(pem) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(_)) => certs += 1,
            Ok(ureq::tls::PemItem::PrivateKey(_)) => keys += 1,
            Ok(_) => {}
            Err(e) => return Err((key, format!("{} is not valid PEM: {e}", path.display()))),
        }
    }
    Ok((certs, keys))
}

fn url(value: &str, key: &'static str, schemes: &[&str]) -> Result<(), KeyError> {
    let uri: http::Uri = value
        .parse()
        .map_err(|_| (key, format!("{value:?} is not a URL")))?;
    match uri.scheme_str() {
        Some(s) if schemes.contains(&s) && uri.host().is_some() => Ok(()),
        _ => Err((
            key,
            format!(
                "{value:?} must be a {} URL with a host",
                schemes
                    .iter()
                    .map(|s| format!("{s}://"))
                    .collect::<Vec<_>>()
                    .join(" or ")
            ),
        )),
    }
}

/// Checks and reads the network keys of `[platform]`.
pub(super) fn check(
    ca_file: Option<&Path>,
    client_cert: Option<&Path>,
    client_key: Option<&Path>,
    proxy: Option<String>,
    oauth2: Option<RawOAuth2>,
) -> Result<Network, KeyError> {
    let ca_pem = match ca_file {
        Some(p) => {
            let pem = read(p, "ca_file")?;
            if pem_items(&pem, p, "ca_file")?.0 == 0 {
                return Err(("ca_file", format!("{} holds no certificate", p.display())));
            }
            Some(pem)
        }
        None => None,
    };
    let client_pem = match (client_cert, client_key) {
        (Some(c), Some(k)) => {
            let (cert, key) = (read(c, "client_cert")?, read(k, "client_key")?);
            if pem_items(&cert, c, "client_cert")?.0 == 0 {
                return Err((
                    "client_cert",
                    format!("{} holds no certificate", c.display()),
                ));
            }
            if pem_items(&key, k, "client_key")?.1 == 0 {
                return Err((
                    "client_key",
                    format!("{} holds no private key", k.display()),
                ));
            }
            Some((cert, key))
        }
        (Some(_), None) => return Err(("client_key", "client_cert needs client_key".into())),
        (None, Some(_)) => return Err(("client_cert", "client_key needs client_cert".into())),
        (None, None) => None,
    };
    if let Some(p) = &proxy {
        url(p, "proxy", &["http", "https"])?;
    }
    let oauth2 = match oauth2 {
        Some(o) => {
            url(&o.token_url, "oauth2.token_url", &["https", "http"])?;
            if o.client_id.is_empty() {
                return Err(("oauth2.client_id", "must not be empty".into()));
            }
            let secret = read(&o.client_secret_file, "oauth2.client_secret_file")?;
            let secret = String::from_utf8_lossy(&secret)
                .trim_end_matches(['\n', '\r'])
                .to_string();
            if secret.is_empty() {
                return Err((
                    "oauth2.client_secret_file",
                    format!("{} is empty", o.client_secret_file.display()),
                ));
            }
            Some(OAuth2 {
                token_url: o.token_url,
                client_id: o.client_id,
                client_secret: secret,
                scope: o.scope,
            })
        }
        None => None,
    };
    Ok(Network {
        ca_pem,
        client_pem,
        proxy,
        oauth2,
    })
}

/// Where Linux distributions keep the system's CA bundle; `SSL_CERT_FILE` overrides.
const SYSTEM_BUNDLES: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
];

/// The system's trusted CAs (PEM): `SSL_CERT_FILE`, else the distribution's bundle. Used for
/// the platform (D33) and the queue database (D39).
pub fn system_ca_bundle() -> Option<Vec<u8>> {
    let env = std::env::var("SSL_CERT_FILE").ok();
    env.iter()
        .map(String::as_str)
        .chain(SYSTEM_BUNDLES)
        .find_map(|path| std::fs::read(path).ok().filter(|pem| !pem.is_empty()))
}

/// The certificates of a PEM bundle.
pub fn certificates(pem: &[u8]) -> Vec<ureq::tls::Certificate<'static>> {
    ureq::tls::parse_pem(pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect()
}

/// The CAs an outgoing HTTPS connection trusts: the system's, plus `extra` (a PEM bundle);
/// the built-in Mozilla list when the system has no bundle and there is no `extra`.
pub fn root_certs(extra: Option<&[u8]>) -> ureq::tls::RootCerts {
    let mut roots = system_ca_bundle()
        .map(|pem| certificates(&pem))
        .unwrap_or_default();
    roots.extend(extra.map(certificates).unwrap_or_default());
    if roots.is_empty() {
        ureq::tls::RootCerts::WebPki
    } else {
        ureq::tls::RootCerts::new_with_certs(&roots)
    }
}
