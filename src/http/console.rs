//! Self-description on the intake listener (D38): `GET /openapi.json` and the console at
//! `/docs/` (Swagger UI, compiled into the binary from `assets/`; nothing is fetched from
//! anywhere else). Neither needs a key.

use http::{HeaderValue, Method, StatusCode, header};
use warp::reply::Response;

/// The policy of every console answer. Swagger UI runs with scripts from the service only (no
/// inline script, no eval), styles from the service only (it styles through the DOM's style
/// properties, which `style-src` does not govern), images from the service and `data:` URIs
/// (the icons of swagger-ui.css), and talks to the service only: the document and the
/// requests a developer sends. No frames, no plugins, no forms posted anywhere, no `<base>`.
pub const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// The console's files, by path under `/docs/`.
const FILES: [(&str, &[u8], &str); 5] = [
    (
        "index.html",
        include_bytes!("../../assets/console/index.html"),
        "text/html; charset=utf-8",
    ),
    (
        "swagger-initializer.js",
        include_bytes!("../../assets/console/swagger-initializer.js"),
        "text/javascript; charset=utf-8",
    ),
    (
        "swagger-ui-bundle.js",
        include_bytes!("../../assets/swagger-ui/swagger-ui-bundle.js"),
        "text/javascript; charset=utf-8",
    ),
    (
        "swagger-ui.css",
        include_bytes!("../../assets/swagger-ui/swagger-ui.css"),
        "text/css; charset=utf-8",
    ),
    (
        "favicon-32x32.png",
        include_bytes!("../../assets/swagger-ui/favicon-32x32.png"),
        "image/png",
    ),
];

/// The answers for the self-description paths, built once at start-up.
pub struct Console {
    openapi: bytes::Bytes,
}

impl Console {
    /// Serves `document` at `/openapi.json`.
    pub fn new(document: &serde_json::Value) -> Self {
        Self {
            openapi: serde_json::to_vec(document).unwrap_or_default().into(),
        }
    }

    /// Whether `path` is one of the console's (the document, `/docs` and the files under it).
    pub fn serves(&self, path: &str) -> bool {
        path == "/openapi.json"
            || path == "/docs"
            || path
                .strip_prefix("/docs/")
                .is_some_and(|name| name.is_empty() || FILES.iter().any(|(n, _, _)| *n == name))
    }

    /// The answer for a self-description path, `None` for any other request (unknown paths
    /// under `/docs/` included: they get the ordinary 404).
    pub fn answer(&self, method: &Method, path: &str) -> Option<Response> {
        if method != Method::GET && method != Method::HEAD {
            return None;
        }
        if path == "/openapi.json" {
            return Some(file(self.openapi.clone(), "application/json"));
        }
        if path == "/docs" {
            let mut r = with_policy(Response::new(bytes::Bytes::new().into()));
            *r.status_mut() = StatusCode::MOVED_PERMANENTLY;
            r.headers_mut()
                .insert(header::LOCATION, HeaderValue::from_static("/docs/"));
            return Some(r);
        }
        let name = match path.strip_prefix("/docs/")? {
            "" => "index.html",
            name => name,
        };
        let (_, body, content_type) = FILES.iter().find(|(n, _, _)| *n == name)?;
        Some(file(bytes::Bytes::from_static(body), content_type))
    }
}

/// 200 with `body`, the policy and no sniffing.
fn file(body: bytes::Bytes, content_type: &'static str) -> Response {
    let mut r = with_policy(Response::new(body.into()));
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn with_policy(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // The files change with the binary: revalidate rather than keep an old console.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}
