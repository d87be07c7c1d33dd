//! Where deliveries go: the AP platform over HTTPS (ureq), or in sandbox the built-in sink
//! (D21).

pub use super::net::ClientError;
use crate::config::{Platform, PlatformAuth};
use crate::interfaces::Interface;
use base64::Engine;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// What the target made of one document. `status` is the HTTP status the answer came with
/// (the platform's, or the proxy's 407), `None` when there was none (a network error, the
/// token endpoint, the sandbox sink): decisions are taken on it, never on `error`'s text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// 2xx: the platform has it.
    Delivered,
    /// Network error, 408, 429, 5xx (or anything not understood): try again later.
    Retry {
        /// For logs and `status`.
        error: String,
        /// The platform's `Retry-After`.
        retry_after: Option<Duration>,
    },
    /// 401, 403, 404, 405, 407: the platform refuses the configuration (credentials, URL,
    /// proxy), not the records; delivery of the interface pauses (D32).
    Paused {
        /// The status, when the refusal came with one.
        status: Option<u16>,
        /// The status and the start of the answer, for logs and `status`.
        error: String,
    },
    /// 413: the document is too large; the batch is halved (D32).
    TooLarge {
        /// The status and the start of the answer.
        error: String,
    },
    /// Another 4xx: the platform refuses the content.
    Rejected {
        /// The status and the start of the answer, kept with a parked record.
        error: String,
    },
}

/// The delivery target.
pub enum Target {
    /// The AP platform.
    Platform(PlatformClient),
    /// The sandbox sink.
    Sandbox(SandboxSink),
}

impl Target {
    /// Sends one XML document of `records` records of `iface`.
    pub fn send(&self, iface: &Interface, doc: &[u8], records: usize) -> Answer {
        match self {
            Self::Platform(p) => p.send(iface, doc),
            Self::Sandbox(s) => s.keep(iface, doc, records),
        }
    }
}

/// The platform's HTTP client. One document per POST, to `<url>/<interface id>`.
pub struct PlatformClient {
    agent: ureq::Agent,
    url: String,
    authorization: Option<String>,
    tokens: Option<Box<super::net::Tokens>>,
}

/// How much of a refusal's body is kept.
const BODY_START: u64 = 300;

impl PlatformClient {
    /// A client for `platform`, giving up on one POST after `timeout`. Fails when the
    /// TLS or proxy settings cannot be used.
    pub fn new(platform: &Platform, timeout: Duration) -> Result<Self, ClientError> {
        let agent = super::net::agent(&platform.network, timeout)?;
        let authorization = platform.auth.as_ref().map(|a| match a {
            PlatformAuth::Bearer(token) => format!("Bearer {token}"),
            PlatformAuth::Basic { username, password } => {
                let raw = format!("{username}:{password}");
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(raw)
                )
            }
        });
        Ok(Self {
            agent,
            url: platform.url.trim_end_matches('/').to_string(),
            authorization,
            tokens: platform
                .network
                .oauth2
                .clone()
                .map(|o| Box::new(super::net::Tokens::new(o))),
        })
    }

    /// The URL an interface's documents go to.
    pub fn url_for(&self, iface: &Interface) -> String {
        format!("{}/{}", self.url, iface.id)
    }

    /// Sends with the configured credentials; with OAuth2, a 401 makes it fetch a new token
    /// and send once more (D33).
    fn send(&self, iface: &Interface, doc: &[u8]) -> Answer {
        let Some(tokens) = &self.tokens else {
            return self.post(iface, doc, self.authorization.as_deref());
        };
        match self.post_with_token(tokens, iface, doc) {
            Answer::Paused {
                status: Some(401), ..
            } => {
                tokens.forget();
                self.post_with_token(tokens, iface, doc)
            }
            other => other,
        }
    }

    fn post_with_token(
        &self,
        tokens: &super::net::Tokens,
        iface: &Interface,
        doc: &[u8],
    ) -> Answer {
        match tokens.token(&self.agent) {
            Ok(token) => self.post(iface, doc, Some(&format!("Bearer {token}"))),
            Err(super::net::TokenError::Refused(error)) => Answer::Paused {
                status: None,
                error,
            },
            Err(super::net::TokenError::Failed(error)) => Answer::Retry {
                error,
                retry_after: None,
            },
        }
    }

    fn post(&self, iface: &Interface, doc: &[u8], authorization: Option<&str>) -> Answer {
        let mut req = self
            .agent
            .post(&self.url_for(iface))
            .header("Content-Type", "application/xml; charset=utf-8");
        if let Some(a) = authorization {
            req = req.header("Authorization", a);
        }
        let mut resp = match req.send(doc) {
            Ok(r) => r,
            Err(e) => return failed(&self.url_for(iface), &e),
        };
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| super::backoff::parse_retry_after(v, SystemTime::now()));
        let mut start = Vec::new();
        let _ = resp
            .body_mut()
            .as_reader()
            .take(BODY_START)
            .read_to_end(&mut start);
        let location = resp
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .map(|l| format!(" (Location: {l}; redirects are not followed: check [platform] url)"))
            .unwrap_or_default();
        let error = reason(resp.status(), &String::from_utf8_lossy(&start), &location);
        match status {
            200..=299 => Answer::Delivered,
            408 | 429 => Answer::Retry { error, retry_after },
            401 | 403 | 404 | 405 | 407 => Answer::Paused {
                status: Some(status),
                error,
            },
            413 => Answer::TooLarge { error },
            400..=499 => Answer::Rejected { error },
            _ => Answer::Retry { error, retry_after },
        }
    }
}

/// A request that got no answer from the platform: retried, except when the proxy refused
/// its credentials (407 to CONNECT), which is the configuration's problem (D32).
pub(super) fn failed(url: &str, e: &ureq::Error) -> Answer {
    let error = format!("{url}: {e}");
    match e {
        // ureq reports the proxy's refusal of CONNECT in words only; its status is 407.
        ureq::Error::ConnectProxyFailed(m) if m.contains("407") => Answer::Paused {
            status: Some(407),
            error: format!("HTTP 407 from the proxy: {error}"),
        },
        _ => Answer::Retry {
            error,
            retry_after: None,
        },
    }
}

/// The reason kept for a non-2xx answer: never empty (D32), whatever the platform sent.
fn reason(status: http::StatusCode, body: &str, location: &str) -> String {
    let body = body.trim();
    let text = if body.is_empty() {
        status.canonical_reason().unwrap_or("no reason given")
    } else {
        body
    };
    format!("HTTP {}: {text}{location}", status.as_u16())
}

/// The sandbox's stand-in for the platform: keeps every document it receives as a file in
/// `<data_dir>/sandbox-sink/`, named `<unix ms>-<seq>-<interface>-<records>.xml`.
pub struct SandboxSink {
    dir: PathBuf,
    seq: AtomicU64,
}

impl SandboxSink {
    /// The sink of the data directory `data_dir`.
    pub fn new(data_dir: &Path) -> Self {
        Self {
            dir: sink_dir(data_dir),
            seq: AtomicU64::new(0),
        }
    }

    fn keep(&self, iface: &Interface, doc: &[u8], records: usize) -> Answer {
        let ms = crate::queue::now_ms();
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let name = format!("{ms:013}-{seq:06}-{}-{records}.xml", iface.id);
        let tmp = self.dir.join(format!(".{name}.tmp"));
        let result = std::fs::create_dir_all(&self.dir)
            .and_then(|()| std::fs::write(&tmp, doc))
            .and_then(|()| std::fs::rename(&tmp, self.dir.join(&name)));
        match result {
            Ok(()) => Answer::Delivered,
            Err(e) => Answer::Retry {
                error: format!("sandbox sink {}: {e}", self.dir.display()),
                retry_after: None,
            },
        }
    }
}

/// Where the sandbox sink keeps what it received.
pub fn sink_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("sandbox-sink")
}
